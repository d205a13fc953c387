"""The allocation-candidates engine behind GET /allocation_candidates.

Data flow::

    handlers/allocation_candidates.py   query string -> CandidateRequest (request.py)
    engine.answer                        read model (default) or tables, then:
    engine.find                          orchestration, the two paths below, asking a
                                         sources.Source each question:
      resolve                            names -> ids, plus the cloud's layout
      single path:  single_trees         filters, orders, limits; trees come back
      spread path:  match                per (group, class): providers with room
                    sharing_anchors      trees each sharing provider serves
                    search.tree_candidates   per anchor tree, lazily, fail-first DFS
                    summaries            trees of the answer only
    handlers/allocation_candidates.render_body   the shape of the microversion

Two sources answer those questions alike:

* ``sources.ModelSource``, from the worker's read model (``model``): the
  tables in memory, brought up to date at the start of every request from the
  change log the database's triggers fill (``feed``; migration 0003);
* ``sources.DatabaseSource``, the reference, from the tables in the request's
  transaction: SQL does the filtering (``query``, ``summaries``).

Python combines request groups tree by tree with generators, so ``limit``
and ``max_allocation_candidates`` stop the work once enough candidates exist.
"""
