"""The allocation-candidates engine behind GET /allocation_candidates.

Data flow (one read transaction, a fixed handful of statements)::

    handlers/allocation_candidates.py   query string -> CandidateRequest (request.py)
    engine.find                          orchestration, the two paths below
      query.resolve                      names -> ids, plus the cloud's layout
      single path:  summaries.single_trees   SQL filters, orders, LIMITs; trees come back
      spread path:  query.match              per (group, class): providers with room
                    query.sharing_anchors    trees each sharing provider serves
                    search.tree_candidates   per anchor tree, lazily, fail-first DFS
                    summaries.summaries      trees of the answer only
    handlers/allocation_candidates.render_body   the shape of the microversion

SQL does the filtering (capacity, traits, aggregates, in_tree, root_required);
Python combines request groups tree by tree with generators, so ``limit``
and ``max_allocation_candidates`` stop the work once enough candidates exist.
"""
