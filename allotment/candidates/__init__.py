"""The allocation-candidates engine behind GET /allocation_candidates.

Data flow::

    http/candidates_query.py            query string -> CandidateRequest (request.py)
    engine.answer                        holds a model.State (the worker's read model,
                                         or one loaded for this request), then:
    engine.find                          the two paths below, asking sources.ModelSource
                                         each question about that state:
      resolve                            names -> ids (resolved.py), the cloud's layout
      single path:  single_trees         providers that serve the one group alone
      spread path:  match                per (group, class): providers with room
                    sharing_anchors      trees each sharing provider serves
                    search.tree_candidates   per anchor tree, lazily, fail-first DFS
                    summaries            trees of the answer only
    http/candidates_render.render_json   the shape of the microversion

Every filter a provider must pass is a rule of ``rules`` (the rule book); the
source selects with the rules, and ``explain`` asks the same rules why not,
on the same state. Rules between providers and groups are ``search.Rules``.
The state is kept current from the change log the database's triggers fill
(``feed``; migration 0003).

Python combines request groups tree by tree with generators, so ``limit``
and ``max_allocation_candidates`` stop the work once enough candidates exist;
``budget`` bounds what one search may cost.
"""
