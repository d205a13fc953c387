"""GET /allocation_candidates, end to end: request in, candidates out.

Two paths, chosen per request from the layout ``ModelSource.resolve`` reports:

* **single**: one request group and no nested or sharing provider holds any
  requested class, so every candidate is one provider: the source filters
  with the rule book, in id order (or at random) until ``limit``.
* **spread**: everything else. The source finds, per group and class, the
  providers with room that pass the group's rules (``ModelSource.match``); they
  are grouped by anchor tree, and ``search`` combines the groups tree by
  tree with a lazy generator, so ``limit`` (and
  ``max_allocation_candidates``) stop the work early.

Each query is timed and reported by the path it took (``SearchObserver``, which
the service wires to its metrics):
``none`` (a group that can match nothing), ``single`` / ``single_random``, and
``spread_depth_first`` / ``spread_breadth_first`` (how ``search.generate`` walks
the trees).

Either way the provider summaries are read last, for the trees in the answer
only.

Randomisation (``randomize_allocation_candidates``) shuffles the trees and
each slot's options *before* generating, and under a ``limit`` takes
candidates from the trees in turn, so a limited answer stays spread over
hosts without generating everything. With ``max_allocation_candidates`` set,
as upstream documents, the sample is drawn from the first ``cap`` candidates
in the usual (id) order.

The engine asks its questions of a ``sources.ModelSource`` over a ``model.State``:
the worker's read model (kept current through the change log the database's
triggers fill, ``feed``) or, with ``[allotment] candidates_source =
database``, a state loaded for the request alone (``model.state_for_request``).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from allotment.candidates import resolved, search
from allotment.candidates.budget import Budget, bounded_product
from allotment.candidates.model import ReadModel, state_for_request
from allotment.candidates.request import CandidateRequest, Settings
from allotment.candidates.resolved import GroupIds, MatchFlag, MatchRow, ProviderSummary
from allotment.candidates.search import Candidate, Rules, Slot
from allotment.candidates.sources import ModelSource
from allotment.db.engine import Database

LOG = logging.getLogger(__name__)

# Match-row flag bits as plain ints: ``int & IntFlag`` builds an enum per
# test, which the per-provider loops below would pay thousands of times.
SHARING = MatchFlag.SHARING.value
ROOT_OK = MatchFlag.ROOT_OK.value
MEMBER = MatchFlag.MEMBER.value
ROOT_MEMBER = MatchFlag.ROOT_MEMBER.value
ROOT_BAD = MatchFlag.ROOT_BAD.value


@dataclass
class Result:
    candidates: list[Candidate] = field(default_factory=list)
    # provider id -> summary, in provider id order
    summaries: dict[int, ProviderSummary] = field(default_factory=dict)
    class_names: dict[int, str] = field(default_factory=dict)
    # provider id -> uuid for every provider named in the candidates
    uuids: dict[int, str] = field(default_factory=dict)


class SearchObserver(Protocol):
    """Who hears of each search (the service's metrics)."""

    def candidates_found(self, path: str, count: int, seconds: float) -> None:
        """A search took ``path`` (see ``_find``), found ``count`` candidates in
        ``seconds``."""


def answer(db: Database, model: ReadModel | None, request: CandidateRequest,
           settings: Settings, budget: Budget | None = None,
           observer: SearchObserver | None = None) -> Result:
    """``find`` on the state for this request (``model.state_for_request``)."""
    with state_for_request(db, model) as held:
        return find(ModelSource(held.state), request, settings, budget=budget,
                    release=held.release, observer=observer)


def find(source: ModelSource, request: CandidateRequest, settings: Settings,
         rng: random.Random | None = None, budget: Budget | None = None,
         release: Callable[[], None] | None = None,
         observer: SearchObserver | None = None) -> Result:
    """The allocation candidates for ``request`` (unknown names raise).

    ``budget`` bounds the search (``candidates.budget``; its refusals raise);
    without one it is unbounded. ``release``, when given, lets go of the
    source: a large search calls it once it has copied what it needs, and
    walks its trees without holding the read model (other requests go on).
    ``observer``, when given, hears of the search once it is done.
    """
    started = time.perf_counter()
    path, result = _find(source, request, settings, rng, budget or Budget.unlimited(),
                         release)
    if observer is not None:
        observer.candidates_found(path, len(result.candidates),
                                  time.perf_counter() - started)
    return result


def _find(source: ModelSource, request: CandidateRequest, settings: Settings,
          rng: random.Random | None, budget: Budget,
          release: Callable[[], None] | None) -> tuple[str, Result]:
    """``find``, and which path it took."""
    prepared = prepare(source, request, budget)
    class_names = prepared.class_names
    if not prepared.possible:
        return "none", Result(class_names=class_names)
    names, groups, roots = prepared.names, prepared.groups, prepared.roots
    rng = (rng or random.Random()) if settings.randomize else None
    layout = names.layout
    summary_of = None
    tail: Summaries = source
    if prepared.single:
        path = "single" if rng is None else "single_random"
        candidates, summary_of = _single(source, groups[0], request, settings, rng, roots)
        budget.spend(len(candidates))
    else:
        path = ("spread_breadth_first" if _breadth_first(request, settings, rng)
                else "spread_depth_first")
        candidates, tail = _spread(source, groups, request, settings, rng, names, roots,
                                     budget, release)
    LOG.debug("candidates: %d returned", len(candidates))
    if not candidates:
        return path, Result(class_names=class_names)
    in_use = {rp for candidate in candidates for rp in candidate.allocations}
    # Before 1.29 only the providers that give resources are summarised.
    only_in_use = not request.nested_aware and layout.has_trees
    if summary_of is None:
        if only_in_use:
            summary_of = tail.summaries(providers=in_use)
        else:
            roots_in_use = {root for candidate in candidates for root in candidate.roots}
            summary_of = tail.summaries(roots=roots_in_use)
    elif only_in_use:
        summary_of = {rp: summary for rp, summary in summary_of.items() if rp in in_use}
    summary_of = {rp: summary_of[rp] for rp in sorted(summary_of)}
    LOG.debug("candidates: %d provider summaries", len(summary_of))
    uuids = {rp: summary.uuid for rp, summary in summary_of.items()}
    named = in_use.union({rp for candidate in candidates
                          for rps in candidate.mappings.values() for rp in rps})
    if not named <= uuids.keys():
        # A resourceless group's provider outside the summarised trees.
        uuids.update(tail.provider_uuids(named - uuids.keys()))
    return path, Result(candidates=candidates, summaries=summary_of,
                        class_names=class_names, uuids=uuids)


@dataclass
class Prepared:
    """A request as ids, checked before any search (``prepare``)."""

    names: resolved.NameIds
    class_names: dict[int, str]
    groups: list[GroupIds] = field(default_factory=list)
    roots: resolved.Roots = field(default_factory=resolved.Roots)
    # False when nothing can match: the answer is no candidates.
    possible: bool = True

    @property
    def single(self) -> bool:
        """Every candidate is one provider (the **single** path)."""
        return len(self.groups) == 1 and not self.names.layout.spread_possible


def prepare(source: ModelSource, request: CandidateRequest, budget: Budget) -> Prepared:
    """Names to ids, and the checks before any search: an unknown name raises
    where upstream meets it (``resolved.refuse_unknown``), and a group that can
    match nothing makes the request impossible (``possible`` False)."""
    names = source.resolve(request)
    class_names = {rc_id: name for name, rc_id in names.classes.items()}
    if resolved.refuse_unknown(request, names, _UpstreamStops(source, request, budget)):
        LOG.debug("candidates: upstream finds nothing before it meets the unknown name: "
                  "no candidates")
        return Prepared(names, class_names, possible=False)
    groups = [resolved.group_ids(group, names) for group in request.groups]
    for group, spec in zip(groups, request.groups, strict=True):
        LOG.debug("candidates: %s", spec.describe())
        if not group.possible:
            LOG.debug("group '%s' names an unknown aggregate or in_tree provider: "
                      "no candidates", group.suffix)
            return Prepared(names, class_names, possible=False)
        if not group.selects:
            LOG.debug("resourceless group '%s' has nothing to select by: no candidates",
                      group.suffix)
            return Prepared(names, class_names, possible=False)
    roots = resolved.Roots(required=tuple(sorted(names.traits[n] for n in request.root_required)),
                           forbidden=tuple(sorted(names.traits[n]
                                                  for n in request.root_forbidden)))
    return Prepared(names, class_names, groups, roots)


class _UpstreamStops:
    """``resolved.Stops`` for one request: the source's answers, and each group
    searched alone (as upstream searches each before it reads the next)."""

    def __init__(self, source: ModelSource, request: CandidateRequest, budget: Budget) -> None:
        self.source = source
        self.request = request
        self.budget = budget

    def roots_match(self, roots: resolved.Roots) -> bool:
        return self.source.roots_match(roots)

    def aggregates_match(self, member_of: tuple[frozenset[int], ...]) -> bool:
        return self.source.aggregates_match(member_of)

    def group_finds(self, index: int) -> bool:
        # Upstream's per-group candidates know nothing of the rules between
        # groups, nor (before 1.29) of one provider per tree: those apply after.
        request = self.request
        alone = CandidateRequest(groups=(request.groups[index],), limit=1,
                                 root_required=request.root_required,
                                 root_forbidden=request.root_forbidden)
        _, result = _find(self.source, alone, Settings(), None, self.budget, None)
        return bool(result.candidates)


def _single(source: ModelSource, group: GroupIds, request: CandidateRequest,
            settings: Settings, rng: random.Random | None, roots: resolved.Roots
            ) -> tuple[list[Candidate], dict[int, ProviderSummary] | None]:
    """Each candidate is one provider: the source filters, orders and limits."""
    cap = settings.max_candidates if settings.max_candidates >= 0 else None
    limits = [n for n in (request.limit, cap) if n is not None]
    amounts = dict(group.resources)  # shared by every candidate, never changed

    def candidate(rp: int, root: int) -> Candidate:
        return Candidate({rp: amounts}, {group.suffix: (rp,)}, roots=(root,))

    if rng is None:
        # The trees come back with the matches (and their traits next).
        trees = source.single_trees(group, roots, min(limits) if limits else None)
        matched = sorted(rp for rp, summary in trees.items() if summary.root_id == rp)
        LOG.debug("single-provider search: %d providers serve the whole request", len(matched))
        return [candidate(rp, rp) for rp in matched], trees
    if cap is not None:
        # Upstream draws the random sample from the first ``cap`` candidates.
        found = source.single_providers(group, roots, cap, None)
    else:
        found = source.single_providers(group, roots, request.limit, rng)
    LOG.debug("single-provider search: %d providers serve the whole request", len(found))
    chosen = search.select((candidate(rp, root) for rp, root in found),
                           request.limit, settings.max_candidates, rng)
    return chosen, None


class _Facts(NamedTuple):
    """What the match rows tell about one provider."""

    root: int
    flags: int
    traits: int


@dataclass
class _Matches:
    """Match rows sorted out: provider ids per part, facts, room."""

    parts: list[tuple[int, int | None]]  # part -> (group index, class id or None)
    by_part: list[list[int]]
    facts: dict[int, _Facts]
    room: dict[tuple[int, int], int]

    def of_group(self, index: int) -> list[list[int]]:
        return [rps for (i, _), rps in zip(self.parts, self.by_part, strict=True) if i == index]


def _sort_rows(groups: list[GroupIds], rows: list[MatchRow]) -> _Matches:
    parts: list[tuple[int, int | None]] = []
    for index, group in enumerate(groups):
        parts += [(index, rc) for rc, _ in group.resources] or [(index, None)]
    by_part: list[list[int]] = [[] for _ in parts]
    # Parts asked once for several groups share one list.
    for part, first in enumerate(resolved.canonical_parts(groups)):
        by_part[part] = by_part[first]
    facts: dict[int, _Facts] = {}
    room: dict[tuple[int, int], int] = {}
    for row in rows:
        by_part[row.part].append(row.provider)
        if row.provider not in facts:
            facts[row.provider] = _Facts(row.root, row.flags, row.traits)
        if row.class_id is not None:
            room[(row.provider, row.class_id)] = row.room
    for rps in {id(rps): rps for rps in by_part}.values():
        rps.sort()
    return _Matches(parts, by_part, facts, room)


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
    options: list[dict[int, list[int]]]
    order: list[int]
    rules: Rules
    facts: dict[int, _Facts]
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
            choices = by_anchor[anchor]
            if shuffle is not None:
                choices = shuffle.sample(choices, len(choices))
            local = local or any(facts[rp].root == anchor for rp in choices)
            tree_slots.append(Slot(slot.suffix, slot.amounts, tuple(choices), slot.granular))
        return tree_slots, local


def plan(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
         names: resolved.NameIds, roots: resolved.Roots) -> Plan | None:
    """The spread search for ``groups`` laid out on the source's state; None when
    no tree can serve them."""
    unsuffixed = next((g for g in groups if not g.same_provider), None)
    unsuffixed_traits = sorted({trait for s in unsuffixed.required for trait in s}) \
        if unsuffixed else []
    matches = _sort_rows(groups, source.match(groups, names.sharing_trait, roots,
                                              unsuffixed_traits))
    for (index, rc), rps in zip(matches.parts, matches.by_part, strict=True):
        LOG.debug("group '%s' class %s: %d providers have room and pass the filters",
                  groups[index].suffix, rc, len(rps))
        if not rps:
            return None
    facts = matches.facts

    serving = _serving_alone(groups, matches)
    if serving is None:
        return None

    # Which sharing providers may serve trees other than their own?
    sharing = {rp for rps in serving.values() for rp in rps if facts[rp].flags & SHARING}
    if unsuffixed is not None:
        sharing |= {rp for rp, f in facts.items() if _shares_unsuffixed(f.flags, unsuffixed)}
    anchors = source.sharing_anchors(
        sharing, roots, unsuffixed.forbidden_aggs if unsuffixed else frozenset()
    ) if sharing else {}
    LOG.debug("%d sharing providers serve %d trees", len(anchors),
              len({a.root for found in anchors.values() for a in found}))

    slots, options = _slots(groups, matches, serving, anchors, roots)

    viable = set(options[0]).intersection(*options[1:])
    LOG.debug("%d trees have an option for every one of %d slots", len(viable), len(slots))
    if not viable:
        return None
    rules = _rules(source, request, unsuffixed, unsuffixed_traits, matches)
    return Plan(slots, options, sorted(viable), rules, facts, bool(anchors))


def _spread(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
            settings: Settings, rng: random.Random | None, names: resolved.NameIds,
            roots: resolved.Roots, budget: Budget, release: Callable[[], None] | None
            ) -> tuple[list[Candidate], Summaries]:
    """The candidates, and the source to read their summaries from (``source``,
    or a copy of the summaries it may need when it was let go of)."""
    laid_out = plan(source, groups, request, names, roots)
    if laid_out is None:
        return [], source
    order = list(laid_out.order)
    # Random order before generating, so that a limit stays fair. With a cap
    # upstream samples from the first ``cap`` in the usual order: so do we.
    shuffle = rng if settings.max_candidates < 0 else None
    if shuffle is not None:
        shuffle.shuffle(order)

    budget.admit(_entries_bound(order, laid_out.options, len(laid_out.slots), request,
                                settings, budget))
    facts = laid_out.facts
    copied: Summaries = source
    if budget.holding and release is not None:
        # A large search: copy what the answer may show, then let the
        # source go; the walk below reads only the plain data built above.
        copied = Copied(source, {f.root for f in facts.values()} | set(order), facts.keys())
        release()
    seen_foreign: set[tuple] = set()

    def make_tree(anchor: int) -> Iterator[Candidate]:
        tree_slots, local = laid_out.tree(anchor, shuffle)
        if not local:
            # Only sharing providers from elsewhere: the same offers as any
            # other tree they serve alike.
            signature = tuple(frozenset(slot.options) for slot in tree_slots)
            if signature in seen_foreign:
                return iter(())
            seen_foreign.add(signature)
        return search.tree_candidates(tree_slots, laid_out.rules, budget.step)

    generated = search.generate(order, make_tree, _breadth_first(request, settings, rng))
    if laid_out.has_sharing:
        # Only sharing providers make one offer reachable from two trees.
        generated = search.unique(generated)
    return search.select(budget.metered(generated, _entry_count), request.limit,
                         settings.max_candidates, rng), copied


def _serving_alone(groups: list[GroupIds], matches: _Matches) -> dict[int, list[int]] | None:
    """Per granular group (by index), the providers with room for all its classes;
    None when one group has none."""
    serving: dict[int, list[int]] = {}
    for index, group in enumerate(groups):
        if group.same_provider:
            first, *others = matches.of_group(index)
            serving[index] = sorted(set(first).intersection(*others)) if others else first
            LOG.debug("group '%s': %d providers serve it alone", group.suffix,
                      len(serving[index]))
            if not serving[index]:
                return None
    return serving


def _slots(groups: list[GroupIds], matches: _Matches, serving: dict[int, list[int]],
           anchors: dict[int, list[resolved.Anchor]], roots: resolved.Roots
           ) -> tuple[list[Slot], list[dict[int, list[int]]]]:
    """One slot per choice (a granular group; a class of the unsuffixed group)
    and, for each slot, its options under each anchor root."""
    facts = matches.facts
    slots: list[Slot] = []
    options: list[dict[int, list[int]]] = []
    for index, group in enumerate(groups):
        if group.same_provider:
            slots.append(Slot(group.suffix, group.resources, (), True))
            options.append(_granular_options(serving[index], facts, anchors, roots))
            continue
        for (i, rc), rps in zip(matches.parts, matches.by_part, strict=True):
            if i == index and rc is not None:
                amount = dict(group.resources)[rc]
                slots.append(Slot("", ((rc, amount),), (), False))
                options.append(_unsuffixed_options(group, rps, facts, anchors, roots))
    return slots, options


class Summaries(Protocol):
    """What is read after the walk: a ``ModelSource``, or a ``Copied`` part of one."""

    def summaries(self, roots: Iterable[int] = (), providers: Iterable[int] = ()
                  ) -> dict[int, ProviderSummary]: ...

    def provider_uuids(self, ids: Iterable[int]) -> dict[int, str]: ...


class Copied:
    """The summaries and uuids an answer may need, copied from a source.

    A ``ModelSource`` for what is read after the walk (``summaries``,
    ``provider_uuids``): every provider of the trees ``roots``, and the uuid
    of each provider in ``named``.
    """

    def __init__(self, source: ModelSource, roots: Iterable[int], named: Iterable[int]) -> None:
        self._summaries = source.summaries(roots=roots)
        self._uuids = {rp: summary.uuid for rp, summary in self._summaries.items()}
        missing = set(named) - self._uuids.keys()
        if missing:
            self._uuids.update(source.provider_uuids(missing))

    def summaries(self, roots: Iterable[int] = (), providers: Iterable[int] = ()
                  ) -> dict[int, ProviderSummary]:
        wanted_roots, wanted = set(roots), set(providers)
        return {rp: summary for rp, summary in self._summaries.items()
                if summary.root_id in wanted_roots or rp in wanted}

    def provider_uuids(self, ids: Iterable[int]) -> dict[int, str]:
        return {rp: self._uuids[rp] for rp in ids if rp in self._uuids}


def _entry_count(candidate: Candidate) -> int:
    return len(candidate.allocations)


def _entries_bound(order: list[int], options: list[dict[int, list[int]]], slot_count: int,
                   request: CandidateRequest, settings: Settings, budget: Budget) -> int:
    """An upper bound of the allocation entries the search can produce.

    Each tree gives at most the product of its slots' option counts, each
    candidate at most one entry per slot; ``limit`` and the configured cap
    bound the count. Counting stops once the bound is known to be large.
    """
    wanted = [n for n in (request.limit, settings.max_candidates) if n is not None and n >= 0]
    large = budget.limits.large_entries // slot_count
    if wanted and min(wanted) <= large:
        return min(wanted) * slot_count  # nova's limit=1000: no need to count
    found = 0
    for anchor in order:
        found += bounded_product((len(by_anchor[anchor]) for by_anchor in options), large)
        if found > large:
            break
    if wanted:
        found = min(found, min(wanted))
    return found * slot_count


def _breadth_first(request: CandidateRequest, settings: Settings,
                   rng: random.Random | None) -> bool:
    """Interleave the trees' candidates rather than take them tree after tree?

    As configured, and always for a random sample under a limit (which takes
    from every tree in turn); with a cap the sample is not shuffled first.
    """
    shuffled = rng is not None and settings.max_candidates < 0
    return settings.strategy == "breadth-first" or (shuffled and request.limit is not None)


def _granular_options(serving: list[int], facts: dict[int, _Facts],
                      anchors: dict[int, list[resolved.Anchor]],
                      roots: resolved.Roots) -> dict[int, list[int]]:
    """anchor root -> providers that can serve a granular group in that tree."""
    by_anchor: dict[int, list[int]] = {}
    for rp in serving:
        root, flags, _ = facts[rp]
        if not roots or flags & ROOT_OK:
            by_anchor.setdefault(root, []).append(rp)
        if flags & SHARING:
            for anchor in anchors.get(rp, ()):
                if anchor.root_ok and anchor.root != root:
                    by_anchor.setdefault(anchor.root, []).append(rp)
    return by_anchor


def _unsuffixed_options(group: GroupIds, providers: list[int], facts: dict[int, _Facts],
                        anchors: dict[int, list[resolved.Anchor]],
                        roots: resolved.Roots) -> dict[int, list[int]]:
    """anchor root -> providers that can serve one class of the unsuffixed group."""
    by_anchor: dict[int, list[int]] = {}
    for rp in providers:
        root, flags, _ = facts[rp]
        local = _local_unsuffixed(flags, group) and (not roots or flags & ROOT_OK)
        if local:
            by_anchor.setdefault(root, []).append(rp)
        if _shares_unsuffixed(flags, group):
            for anchor in anchors.get(rp, ()):
                if anchor.root_ok and not anchor.bad and not (local and anchor.root == root):
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


def _local_unsuffixed(flags: int, group: GroupIds) -> bool:
    """May this provider serve the unsuffixed group in its own tree?"""
    if group.member_of and not flags & (MEMBER | ROOT_MEMBER):
        return False
    return not flags & ROOT_BAD


def _shares_unsuffixed(flags: int, group: GroupIds) -> bool:
    """May this provider serve the unsuffixed group in other trees?"""
    if not flags & SHARING or group.tree_root is not None:
        return False
    return not group.member_of or bool(flags & MEMBER)
