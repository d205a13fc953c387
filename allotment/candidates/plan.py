"""A spread search laid out: each slot's options in each tree, before any walk.

``engine`` asks the source for the providers that can serve each part of a
request on its own (``ModelSource.match``, with the rule book's
``rules.GroupRules``), then ``plan`` sorts them into *slots* (a granular
group; one class of the unsuffixed group) and, per slot, the providers that
may serve it in each anchor tree: its own providers that may serve at home,
and sharing providers that reach it through an aggregate. The trees with an
option for every slot are the ones ``search`` walks.

A search that a limit stops, walking the trees in id order, lays them out a
window of trees at a time instead (``in_windows``): the same options, tree for
tree, for only the trees the walk reaches.

Asked for the ``whole`` plan (for a ``trace.Trace``), nothing stops early: every
slot's options are laid out even when one slot has none anywhere, so that
explain can tell every tree what it lacks.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any, NamedTuple

from allotment.candidates import resolved, search
from allotment.candidates.request import CandidateRequest
from allotment.candidates.resolved import GroupIds, Match
from allotment.candidates.search import Rules, Slot
from allotment.candidates.sources import ModelSource

LOG = logging.getLogger(__name__)


class Facts(NamedTuple):
    """What the match tells about one provider."""

    root: int
    traits: int


@dataclass
class _Matches:
    """The match sorted out: provider ids per part, facts, room."""

    parts: list[tuple[int, int | None]]  # part -> (group index, class id or None)
    by_part: list[list[int]]
    # Per part: provider -> (it may serve its own tree, it may serve others).
    standing: list[dict[int, tuple[bool, bool]]]
    facts: dict[int, Facts]
    room: dict[tuple[int, int], int]

    def of_group(self, index: int) -> list[int]:
        return [part for part, (i, _) in enumerate(self.parts) if i == index]


def _sort_matches(groups: list[GroupIds], rows: list[Match]) -> _Matches:
    parts: list[tuple[int, int | None]] = []
    for index, group in enumerate(groups):
        parts += [(index, rc) for rc, _ in group.resources] or [(index, None)]
    by_part: list[list[int]] = [[] for _ in parts]
    standing: list[dict[int, tuple[bool, bool]]] = [{} for _ in parts]
    # Parts asked once for several groups share one list.
    for part, first in enumerate(resolved.canonical_parts(groups)):
        by_part[part] = by_part[first]
        standing[part] = standing[first]
    facts: dict[int, Facts] = {}
    room: dict[tuple[int, int], int] = {}
    for row in rows:
        by_part[row.part].append(row.provider)
        standing[row.part][row.provider] = (row.home, row.shares)
        if row.provider not in facts:
            facts[row.provider] = Facts(row.root, row.traits)
        if row.class_id is not None:
            room[(row.provider, row.class_id)] = row.room
    for rps in {id(rps): rps for rps in by_part}.values():
        rps.sort()
    return _Matches(parts, by_part, standing, facts, room)


@dataclass
class Plan:
    """A spread search laid out, before any tree is walked (``plan``).

    One slot per choice (a granular group; a class of the unsuffixed group),
    each slot's options under each anchor tree (provider ids in id order,
    every one able to serve the slot alone at the state's usage), the anchor
    trees that have an option for every slot (in id order) and the rules
    between providers and groups the walk keeps.
    """

    slots: list[Slot]
    options: Sequence[Mapping[int, list[int]]]
    order: list[int]
    rules: Rules
    facts: Mapping[int, Facts]
    # Some sharing provider serves trees other than its own.
    has_sharing: bool = False

    def tree(self, anchor: int, shuffle: random.Random | None = None
             ) -> tuple[list[Slot], bool]:
        """The slots of one anchor tree with their options, and whether any option
        is a provider of that tree (False: only sharing providers from elsewhere)."""
        facts = self.facts
        tree_slots = []
        local = False
        for slot, by_anchor in zip(self.slots, self.options, strict=True):
            choices = by_anchor.get(anchor, [])
            if shuffle is not None:
                choices = shuffle.sample(choices, len(choices))
            local = local or any(facts[rp].root == anchor for rp in choices)
            tree_slots.append(Slot(slot.suffix, slot.amounts, tuple(choices), slot.granular))
        return tree_slots, local


def plan(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
         names: resolved.NameIds, roots: resolved.Roots, whole: bool = False
         ) -> Plan | None:
    """The spread search for ``groups`` laid out on the source's state; None when
    no tree can serve them (unless the ``whole`` plan is asked for)."""
    unsuffixed, unsuffixed_traits = _unsuffixed(groups)
    rows = source.match(groups, names.sharing_trait, roots, unsuffixed_traits)
    sharing = {row.provider for row in rows if row.shares}
    return _lay_out(source, groups, request, unsuffixed, unsuffixed_traits, rows,
                    _sharing_anchors(source, sharing, roots, unsuffixed), whole)


# The first window holds this fraction of the wanted candidates' count of trees
# (and at least ``FIRST_WINDOW_LEAST``): a tree often gives more than one
# candidate (its own disk, or a pool's), and the windows double after it, so at
# most about twice the trees needed are laid out.
FIRST_WINDOW_SHARE = 4
FIRST_WINDOW_LEAST = 16
# Every window lays out the sharing providers again: windows pay only while
# they are at most this fraction of the cloud's providers.
MOST_SHARERS = 1 / 8


@dataclass
class Windows:
    """``plan`` a window of anchor trees at a time (``in_windows``)."""

    # Some sharing provider may serve trees other than its own.
    has_sharing: bool
    # Each window's plan, windows in root id order; a window no tree of
    # which can serve the request is left out.
    plans: Iterator[Plan]


def in_windows(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
               names: resolved.NameIds, roots: resolved.Roots, wanted: int
               ) -> Windows | None:
    """``plan``'s trees, laid out a window at a time (``ModelSource.tree_windows``:
    a ``FIRST_WINDOW_SHARE`` of the ``wanted`` candidates' count of roots, then
    twice as many each time), so that a search stopped by a limit lays out
    only the trees it walks.

    What the trees of one window are offered is what ``plan`` offers them: a
    tree's options are its own providers and the sharing providers that reach
    it. The sharing providers, wherever their own trees are, are matched once
    and join every window; the ``order`` of the windows' plans, one after
    another, is ``plan``'s. None when the sharing providers are too many of
    the cloud (``MOST_SHARERS``) for windows to cost less than ``plan``.
    """
    unsuffixed, unsuffixed_traits = _unsuffixed(groups)
    sharers: list[int] = []
    if names.sharing_trait is not None:
        sharers = sorted(source.state.with_trait.get(names.sharing_trait, ()))
        if len(sharers) > len(source.state.providers) * MOST_SHARERS:
            return None
    shared_rows = source.match(groups, names.sharing_trait, roots, unsuffixed_traits,
                               among=sharers) if sharers else []
    sharing = {row.provider for row in shared_rows if row.shares}
    first = max(wanted // FIRST_WINDOW_SHARE, FIRST_WINDOW_LEAST)

    def plans() -> Iterator[Plan]:
        for window, members in source.tree_windows(first, set(sharers)):
            rows = source.match(groups, names.sharing_trait, roots, unsuffixed_traits,
                                among=members)
            anchors = _sharing_anchors(source, sharing, roots, unsuffixed, within=window)
            laid_out = _lay_out(source, groups, request, unsuffixed, unsuffixed_traits,
                                rows + shared_rows, anchors, window=window)
            if laid_out is not None:
                yield laid_out

    # Without sharing providers no offer is reachable from two trees (with
    # some, de-duplication may find nothing to drop).
    return Windows(bool(sharing), plans())


def _unsuffixed(groups: list[GroupIds]) -> tuple[GroupIds | None, list[int]]:
    """The unsuffixed group, if any, and the traits it requires (sorted)."""
    unsuffixed = next((g for g in groups if not g.same_provider), None)
    traits = sorted({trait for s in unsuffixed.required for trait in s}) if unsuffixed else []
    return unsuffixed, traits


def _sharing_anchors(source: ModelSource, sharing: set[int], roots: resolved.Roots,
                     unsuffixed: GroupIds | None, within: AbstractSet[int] | None = None
                     ) -> dict[int, list[resolved.Anchor]]:
    """The trees (``within`` these, when given) each matched sharing provider may
    serve besides its own."""
    anchors = source.sharing_anchors(
        sharing, roots, unsuffixed.forbidden_aggs if unsuffixed else frozenset(), within
    ) if sharing else {}
    LOG.debug("%d sharing providers serve %d trees", len(anchors),
              len({a.root for found in anchors.values() for a in found}))
    return anchors


def _lay_out(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
             unsuffixed: GroupIds | None, unsuffixed_traits: list[int], rows: list[Match],
             anchors: dict[int, list[resolved.Anchor]], whole: bool = False,
             window: AbstractSet[int] | None = None) -> Plan | None:
    """The plan from the match's ``rows`` and the sharing providers' ``anchors``;
    with a ``window``, of those anchor trees only."""
    matches = _sort_matches(groups, rows)
    for (index, rc), rps in zip(matches.parts, matches.by_part, strict=True):
        LOG.debug("group '%s' class %s: %d providers have room and pass the filters",
                  groups[index].suffix, rc, len(rps))
        if not rps and not whole:
            return None

    serving = _serving_alone(groups, matches)
    if not whole and any(not rps for rps in serving.values()):
        return None

    slots, options = _slots(groups, matches, serving, anchors)

    viable = set(options[0]).intersection(*options[1:]) if options else set()
    if window is not None:
        viable &= window
    LOG.debug("%d trees have an option for every one of %d slots", len(viable), len(slots))
    if not viable and not whole:
        return None
    rules = _rules(source, request, unsuffixed, unsuffixed_traits, matches)
    return Plan(slots, options, sorted(viable), rules, matches.facts, bool(anchors))


def single_plan(source: ModelSource, group: GroupIds, roots: resolved.Roots) -> Plan:
    """The single path's plan, for a trace: every provider that serves the one
    group alone (the single path's own filter, without a limit), as the one
    option of its tree for every slot. (On that layout each tree is one
    provider, and one that serves every slot yields a candidate.)"""
    passing = source.every_single(group, roots)
    alone = _Alone(passing)
    if group.same_provider:
        slots = [Slot(group.suffix, group.resources, (), True)]
    else:
        slots = [Slot("", ((rc, amount),), (), False) for rc, amount in group.resources]
    return Plan(slots, [alone for _ in slots], passing, Rules(room={}), alone.facts)


class _Alone(Mapping[int, list[int]]):
    """root -> [itself], for the providers that serve alone (flat: each its own
    tree), without a list per provider made up front (10,000 of them)."""

    def __init__(self, providers: list[int]) -> None:
        self._providers = set(providers)
        self.facts = _AloneFacts(self._providers)

    def __getitem__(self, root: int) -> list[int]:
        if root not in self._providers:
            raise KeyError(root)
        return [root]

    def __contains__(self, root: object) -> bool:
        return root in self._providers

    def get(self, root: int, default: Any = None) -> Any:
        # Mapping's own get goes through a KeyError: too slow for 10,000 trees.
        return [root] if root in self._providers else default

    def __iter__(self) -> Iterator[int]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)


class _AloneFacts(Mapping[int, Facts]):
    def __init__(self, providers: set[int]) -> None:
        self._providers = providers

    def __getitem__(self, rp: int) -> Facts:
        if rp not in self._providers:
            raise KeyError(rp)
        return Facts(rp, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)


def slot_count(groups: list[GroupIds]) -> int:
    """How many slots ``plan`` makes of ``groups`` (``_slots``): one per granular
    group, one per class of the unsuffixed group."""
    return sum(1 if group.same_provider else len(group.resources) for group in groups)


def _serving_alone(groups: list[GroupIds], matches: _Matches) -> dict[int, list[int]]:
    """Per granular group (by index), the providers with room for all its classes."""
    serving: dict[int, list[int]] = {}
    for index, group in enumerate(groups):
        if group.same_provider:
            first, *others = (matches.by_part[part] for part in matches.of_group(index))
            serving[index] = sorted(set(first).intersection(*others)) if others else first
            LOG.debug("group '%s': %d providers serve it alone", group.suffix,
                      len(serving[index]))
    return serving


def _slots(groups: list[GroupIds], matches: _Matches, serving: dict[int, list[int]],
           anchors: dict[int, list[resolved.Anchor]]
           ) -> tuple[list[Slot], list[dict[int, list[int]]]]:
    """One slot per choice (a granular group; a class of the unsuffixed group)
    and, for each slot, its options under each anchor root."""
    slots: list[Slot] = []
    options: list[dict[int, list[int]]] = []
    for index, group in enumerate(groups):
        parts = matches.of_group(index)
        if group.same_provider:
            slots.append(Slot(group.suffix, group.resources, (), True))
            options.append(_options(serving[index], matches.standing[parts[0]],
                                    matches.facts, anchors, unsuffixed=False))
            continue
        for part in parts:
            rc = matches.parts[part][1]
            if rc is not None:
                slots.append(Slot("", ((rc, dict(group.resources)[rc]),), (), False))
                options.append(_options(matches.by_part[part], matches.standing[part],
                                        matches.facts, anchors, unsuffixed=True))
    return slots, options


def _options(providers: list[int], standing: dict[int, tuple[bool, bool]],
             facts: dict[int, Facts], anchors: dict[int, list[resolved.Anchor]],
             unsuffixed: bool) -> dict[int, list[int]]:
    """anchor root -> the providers that may serve one slot in that tree: at home,
    or as sharing providers of the trees they reach (whose root must pass
    root_required, and for the unsuffixed group lie outside its forbidden
    aggregates)."""
    by_anchor: dict[int, list[int]] = {}
    for rp in providers:
        root = facts[rp].root
        home, shares = standing[rp]
        if home:
            by_anchor.setdefault(root, []).append(rp)
        if shares:
            for anchor in anchors.get(rp, ()):
                if anchor.root_ok and not (unsuffixed and anchor.bad) \
                        and not (home and anchor.root == root):
                    by_anchor.setdefault(anchor.root, []).append(rp)
    return by_anchor


def _rules(source: ModelSource, request: CandidateRequest, unsuffixed: GroupIds | None,
           unsuffixed_traits: list[int], matches: _Matches) -> Rules:
    facts = matches.facts
    ancestors: dict[int, frozenset[int]] = {}
    subtrees = tuple(s for s in request.same_subtrees if len(s) > 1)
    if subtrees:
        ancestors = search.ancestors(source.tree_parents({f.root for f in facts.values()}))
    masks: tuple[int, ...] = ()
    if unsuffixed is not None:
        bit = {trait: 1 << i for i, trait in enumerate(unsuffixed_traits)}
        masks = tuple(sum(bit[trait] for trait in s) for s in unsuffixed.required)
    return Rules(
        room=matches.room,
        isolate=request.isolate,
        one_provider_per_tree=not request.nested_aware,
        root_of={rp: f.root for rp, f in facts.items()},
        unsuffixed_required=masks,
        trait_bits={rp: f.traits for rp, f in facts.items()} if masks else {},
        same_subtrees=subtrees,
        ancestors=ancestors,
    )


def reach(source: ModelSource, sharing_trait: int | None) -> dict[int, list[int]]:
    """root -> the sharing providers of other trees in an aggregate with one of its
    providers (the engine's ``sharing_anchors``, before any group's rules)."""
    if sharing_trait is None:
        return {}
    state = source.state
    sharing = state.with_trait.get(sharing_trait, set())
    found: dict[int, list[int]] = {}
    for share, anchors in source.sharing_anchors(sharing, resolved.Roots(),
                                                 frozenset()).items():
        own_root = state.providers[share].root
        for anchor in anchors:
            if anchor.root != own_root:
                found.setdefault(anchor.root, []).append(share)
    return found
