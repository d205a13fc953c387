"""The allocation-candidates engine behind GET /allocation_candidates.

Data flow::

    http/candidates_query.py            query string -> CandidateRequest (request.py)
    engine.answer                        holds a model.State (the worker's read model,
                                         or one loaded for this request), then:
    engine.find                          the two paths below, asking sources.ModelSource
                                         each question about that state:
      resolve                            names -> ids (resolved.py), the cloud's layout
      single path:  single_trees         providers that serve the one group alone
      spread path:  match                per (group, class): providers with room that
                                         pass the group's rules (rules.group_rules)
                    plan.plan            each slot's options per tree (sharing_anchors:
                                         the trees each sharing provider serves)
                    search.tree_candidates   per anchor tree, lazily, fail-first DFS
                    summaries            trees of the answer only
    http/candidates_render.render_json   the shape of the microversion

Every filter a provider must pass is a rule of ``rules`` (the rule book); the
source selects with the rules. Rules between providers and groups are
``search.Rules``. ``explain`` words the engine's ``trace.Trace`` of the same
search: the plan's missing options (asking the rules that decided why not)
and the walk's ``search.Shortfall``.
The state is kept current from the change log the database's triggers fill
(``feed``; migration 0003).

Python combines request groups tree by tree with generators, so ``limit``
and ``max_allocation_candidates`` stop the work once enough candidates exist;
``budget`` bounds what one search may cost.
"""
