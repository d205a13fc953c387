"""GET /allocation_candidates, end to end: request in, candidates out.

Two paths, chosen per request from the layout ``ModelSource.resolve`` reports:

* **single**: one request group and no nested or sharing provider holds any
  requested class, so every candidate is one provider: the source filters
  with the rule book, in id order (or at random) until ``limit``.
* **spread**: everything else. The source finds, per group and class, the
  providers with room that pass the group's rules (``ModelSource.match``); they
  are grouped by anchor tree, and ``search`` combines the groups tree by
  tree with a lazy generator, so ``limit`` (and
  ``max_allocation_candidates``) stop the work early. When they do, and the
  trees are walked in id order, the trees are laid out a window at a time
  (``plan.in_windows``) as far as the walk goes: nova's ``limit=1000`` costs
  what the first thousand candidates cost, not what the cloud holds.

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

import itertools
import logging
import random
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from allotment.candidates import resolved, rules, search
from allotment.candidates.budget import Budget, bounded_product
from allotment.candidates.model import ReadModel, state_for_request
from allotment.candidates.plan import Plan, in_windows, plan, reach, single_plan, slot_count
from allotment.candidates.request import CandidateRequest, Settings
from allotment.candidates.resolved import GroupIds, ProviderSummary
from allotment.candidates.search import Candidate
from allotment.candidates.sources import ModelSource
from allotment.candidates.trace import Trace
from allotment.db.engine import Database

LOG = logging.getLogger(__name__)


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
         observer: SearchObserver | None = None, trace: Trace | None = None) -> Result:
    """The allocation candidates for ``request`` (unknown names raise).

    ``budget`` bounds the search (``candidates.budget``; its refusals raise);
    without one it is unbounded. ``release``, when given, lets go of the
    source: a large search calls it once it has copied what it needs, and
    walks its trees without holding the read model (other requests go on).
    ``observer``, when given, hears of the search once it is done. ``trace``,
    when given, is filled in with what the search decided (for explain).
    """
    started = time.perf_counter()
    path, result = _find(source, request, settings, rng, budget or Budget.unlimited(),
                         release, trace)
    if observer is not None:
        observer.candidates_found(path, len(result.candidates),
                                  time.perf_counter() - started)
    return result


def _find(source: ModelSource, request: CandidateRequest, settings: Settings,
          rng: random.Random | None, budget: Budget,
          release: Callable[[], None] | None, trace: Trace | None = None
          ) -> tuple[str, Result]:
    """``find``, and which path it took."""
    prepared = prepare(source, request, budget)
    class_names = prepared.class_names
    if trace is not None:
        trace.source = source
        trace.names, trace.possible = prepared.names, prepared.possible
        trace.groups = prepared.groups or [resolved.group_ids(group, prepared.names)
                                           for group in request.groups]
    if not prepared.possible:
        return "none", Result(class_names=class_names)
    names, groups, roots = prepared.names, prepared.groups, prepared.roots
    rng = (rng or random.Random()) if settings.randomize else None
    layout = names.layout
    summary_of = None
    tail: Summaries = source
    if prepared.single:
        path = "single" if rng is None else "single_random"
        every = None
        if trace is not None:
            trace.group_rules = [rules.group_rules(groups[0], source.state, names.sharing_trait,
                                                   roots)]
            trace.plan = single_plan(source, groups[0], roots)
            every = trace.plan.order
        candidates, summary_of = _single(source, groups[0], request, settings, rng, roots,
                                         every)
        budget.spend(len(candidates))
    else:
        path = ("spread_breadth_first" if _breadth_first(request, settings, rng)
                else "spread_depth_first")
        candidates, tail = _spread(source, groups, request, settings, rng, names, roots,
                                   budget, release, trace)
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
            settings: Settings, rng: random.Random | None, roots: resolved.Roots,
            every: list[int] | None = None
            ) -> tuple[list[Candidate], dict[int, ProviderSummary] | None]:
    """Each candidate is one provider: the source filters, orders and limits.
    ``every``: all the providers that serve, in id order, when already known
    (a trace lists them)."""
    cap = settings.max_candidates if settings.max_candidates >= 0 else None
    limits = [n for n in (request.limit, cap) if n is not None]
    amounts = dict(group.resources)  # shared by every candidate, never changed

    def candidate(rp: int, root: int) -> Candidate:
        return Candidate({rp: amounts}, {group.suffix: (rp,)}, roots=(root,))

    if rng is None:
        # The trees come back with the matches (and their traits next).
        first = min(limits) if limits else None
        trees = source.single_trees(group, roots, first) if every is None \
            else source.summaries(roots=every[:first])
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


def _spread(source: ModelSource, groups: list[GroupIds], request: CandidateRequest,
            settings: Settings, rng: random.Random | None, names: resolved.NameIds,
            roots: resolved.Roots, budget: Budget, release: Callable[[], None] | None,
            trace: Trace | None) -> tuple[list[Candidate], Summaries]:
    """The candidates, and the source to read their summaries from (``source``,
    or a copy of the summaries it may need when it was let go of)."""
    if trace is not None:
        trace.group_rules = [rules.group_rules(group, source.state, names.sharing_trait, roots)
                             for group in groups]
        trace.reach = reach(source, names.sharing_trait)
    # Random order before generating, so that a limit stays fair. With a cap
    # upstream samples from the first ``cap`` in the usual order: so do we.
    shuffle = rng if settings.max_candidates < 0 else None
    seen_foreign: set[tuple] = set()

    def make_tree(laid_out: Plan, anchor: int) -> Iterator[Candidate]:
        tree_slots, local = laid_out.tree(anchor, shuffle)
        if trace is not None:
            trace.walked.append(anchor)
        if not local:
            # Only sharing providers from elsewhere: the same offers as any
            # other tree they serve alike.
            signature = tuple(frozenset(slot.options) for slot in tree_slots)
            if signature in seen_foreign:
                if trace is not None:
                    trace.same_offer.add(anchor)
                return iter(())
            seen_foreign.add(signature)
        none_found = None if trace is None else partial(trace.shortfalls.__setitem__, anchor)
        return search.tree_candidates(tree_slots, laid_out.rules, budget.step, none_found)

    first = _first_needed(groups, request, settings, budget)
    if first is not None and trace is None and shuffle is None and not budget.holding \
            and not _breadth_first(request, settings, rng):
        # The trees are walked in id order until the limit: lay them out a
        # window at a time, as far as the walk goes.
        windows = in_windows(source, groups, request, names, roots, first)
        if windows is not None:
            budget.admit(first * slot_count(groups))
            generated: Iterator[Candidate] = itertools.chain.from_iterable(
                search.generate(laid_out.order, partial(make_tree, laid_out), False)
                for laid_out in windows.plans)
            if windows.has_sharing:
                generated = search.unique(generated)
            return search.select(budget.metered(generated, _entry_count), request.limit,
                                 settings.max_candidates, rng), source

    laid_out = plan(source, groups, request, names, roots, whole=trace is not None)
    if trace is not None:
        trace.plan = laid_out
    if laid_out is None or not laid_out.order:
        return [], source
    order = list(laid_out.order)
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
    generated = search.generate(order, partial(make_tree, laid_out),
                                _breadth_first(request, settings, rng))
    if laid_out.has_sharing:
        # Only sharing providers make one offer reachable from two trees.
        generated = search.unique(generated)
    return search.select(budget.metered(generated, _entry_count), request.limit,
                         settings.max_candidates, rng), copied


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


def _wanted(request: CandidateRequest, settings: Settings) -> int | None:
    """The most candidates the answer takes (``limit``, the cap), or None."""
    wanted = [n for n in (request.limit, settings.max_candidates) if n is not None and n >= 0]
    return min(wanted) if wanted else None


def _first_needed(groups: list[GroupIds], request: CandidateRequest, settings: Settings,
                  budget: Budget) -> int | None:
    """How many candidates the search takes at most, when ``limit`` or the cap
    says so and that is small enough to bound the search (``_entries_bound``'s
    answer without counting); None otherwise."""
    wanted = _wanted(request, settings)
    slots = slot_count(groups)
    if wanted is None or not slots or wanted > budget.limits.large_entries // slots:
        return None
    return wanted


def _entries_bound(order: list[int], options: Sequence[Mapping[int, list[int]]], slots: int,
                   request: CandidateRequest, settings: Settings, budget: Budget) -> int:
    """An upper bound of the allocation entries the search can produce.

    Each tree gives at most the product of its slots' option counts, each
    candidate at most one entry per slot; ``limit`` and the configured cap
    bound the count. Counting stops once the bound is known to be large.
    """
    wanted = _wanted(request, settings)
    large = budget.limits.large_entries // slots
    if wanted is not None and wanted <= large:
        return wanted * slots  # nova's limit=1000: no need to count
    found = 0
    for anchor in order:
        found += bounded_product((len(by_anchor[anchor]) for by_anchor in options), large)
        if found > large:
            break
    if wanted is not None:
        found = min(found, wanted)
    return found * slots


def _breadth_first(request: CandidateRequest, settings: Settings,
                   rng: random.Random | None) -> bool:
    """Interleave the trees' candidates rather than take them tree after tree?

    As configured, and always for a random sample under a limit (which takes
    from every tree in turn); with a cap the sample is not shuffled first.
    """
    shuffled = rng is not None and settings.max_candidates < 0
    return settings.strategy == "breadth-first" or (shuffled and request.limit is not None)
