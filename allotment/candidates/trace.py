"""What one search decided, kept when explain asks (``engine.find(trace=...)``).

The engine fills it in as it answers: the request as ids and the rules each
group's providers had to pass (``rules.GroupRules``), the plan (every slot's
options in every tree, and the trees with an option for each), the trees the
walk reached, and for each tree walked without a candidate the shortfall that
decided (``search.Shortfall``). Explain words what is here and the refusals of
the rules named here; it decides nothing again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from allotment.candidates.plan import Plan
from allotment.candidates.resolved import GroupIds, NameIds
from allotment.candidates.rules import GroupRules
from allotment.candidates.search import Shortfall
from allotment.candidates.sources import ModelSource


@dataclass
class Trace:
    # The source the search asked (its answers, such as ``with_room``, kept).
    source: ModelSource | None = None
    names: NameIds | None = None
    groups: list[GroupIds] = field(default_factory=list)
    # False: some group can match nothing (or upstream stops before an
    # unknown name); nothing was searched.
    possible: bool = True
    group_rules: list[GroupRules] = field(default_factory=list)
    plan: Plan | None = None
    # root -> the sharing providers of other trees that reach it through an
    # aggregate (``ModelSource.sharing_anchors`` of every sharing provider).
    reach: dict[int, list[int]] = field(default_factory=dict)
    # Anchor trees the walk reached, in order; those found to have no candidate,
    # and why; those skipped because their sharing providers made the same
    # offer to a tree walked before.
    walked: list[int] = field(default_factory=list)
    shortfalls: dict[int, Shortfall] = field(default_factory=dict)
    same_offer: set[int] = field(default_factory=set)
