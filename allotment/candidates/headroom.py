"""How many more consumers of one request fit: GET /headroom.

"How many more m1.large can this cloud take?" The request is an
allocation-candidates request (``CandidateRequest``); the answer is how many
consumers asking exactly that could be placed one after another, as a
scheduler places them: each takes a candidate of GET /allocation_candidates
and claims it, and the next is asked on what is left.

The scheduler counted is the plain one: it claims the **first** candidate
the engine lists (provider id order, no randomisation) until the answer is
empty. Its candidates come tree after tree, so it fills the first anchor tree
that has a candidate, then the next, in the engine's order (root provider id).
That is what ``count`` simulates, by the engine's own matching and walk, on
an overlay of usage (``Usage``); the state is never changed:

* **single** layout (one request group; no nested or sharing provider holds a
  requested class): every candidate is one provider, found by the source with
  the rule book as the engine finds it (``ModelSource.single_holders``, then room),
  and providers share nothing, so the count per provider is the capacity
  rule's closed form (``rules.Fits.times_each``: ``capacity.how_many`` per
  class, the least of them). Exact, and the most that can fit (``optimal``).
* **spread** layout (everything else): the engine lays the search out once
  (``plan.plan``: slots, options per anchor tree, the rules between
  providers and groups). Then per anchor tree, in order: narrow every slot's
  options to the providers that still serve it alone by the capacity rule on
  the overlay, walk the tree for its first candidate (``search.tree_candidates``,
  the engine's walk, with ``room`` from the overlay), claim it on the overlay,
  again until the tree has no candidate. A candidate is claimed as many times
  in a row as it stays the walk's first: while it fits and no slot loses an
  option (the walk's order is then the same, and it is the first candidate
  that still fits), both bounds by ``capacity.how_many``; so a tree costs one
  walk per change of its options, not one per consumer. Sharing providers
  serve several trees: what a tree takes from one is taken for the trees
  after it (the overlay is global), which is why the trees go in the engine's
  order. Greedy: a different choice of candidates can sometimes fit more
  (``optimal`` is then False); at least the count fits, as the scheduler above
  places exactly that many.

What-if (``WhatIf``), answered for the imagined cloud without writing
anything: ``exclude_roots`` takes whole trees out (their providers, sharing
ones too, serve nothing); ``add`` imagines root providers with the inventories
of a template (``HostTemplate``), with no traits and no aggregates, so a
request that needs either does not fit on them. They share nothing with the
rest of the cloud, so one is counted alone, on a state of its own holding it,
by the same procedure, and the count is multiplied.

Per root: each placement counts for the anchor tree it is claimed in, or
(when it takes only from sharing providers of other trees) for the root of
the first of those. Per aggregate (only when the request has ``member_of``):
each placement counts once for every aggregate named in a ``member_of`` that
its root or a provider it takes from is in.

The work is bounded by the candidates budget (``budget.Budget``: its clock is
checked at every step of every walk; a count over more than
``candidates_large_entries`` trees x slots, or running past the grace time,
takes a large-search slot), and a tree stops after ``MAX_ROUNDS`` walks (its
count so far stands: that many fit; ``capped`` says how many trees stopped
so). A count that may be large by its request's shape alone (``shape_bound``:
slots x the providers the model held last and the imagined hosts) takes its
slot before it takes the read model, so one refused for lack of a slot costs
the model nothing. The spread path copies the providers it reads and lets go of
the read model before it walks, and the imagined hosts are counted after it is
let go of (on a copy of the names), so the worker's other requests go on
meanwhile.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from allotment.candidates import engine, rules, search
from allotment.candidates.budget import Budget
from allotment.candidates.model import Provider, ReadModel, State, state_for_request
from allotment.candidates.plan import plan
from allotment.candidates.request import CandidateRequest
from allotment.candidates.search import Candidate, Slot
from allotment.candidates.sources import ModelSource
from allotment.db.engine import Database
from allotment.ledger import capacity, inventories
from allotment.ledger.common import STANDARD_CLASS_IDS
from allotment.ledger.errors import (
    AddedCapacityOutOfRange,
    AddedClassNotFound,
    ExcludedNotRoot,
    ExcludedRootNotFound,
)

LOG = logging.getLogger(__name__)

# Walks of one tree at most (each walk finds a candidate that is then claimed
# once or more): far more than any tree of real hosts needs.
MAX_ROUNDS = 10_000

# Hosts one ``add`` may imagine.
MAX_ADDED_HOSTS = 100_000
# ``add`` templates one request may give: each is counted on its own (an
# engine's preparation and walk), so thousands of them took a thread for the
# whole time limit; a cloud has a handful of host types.
MAX_TEMPLATES = 100

# The imagined host's id and uuid, in the state of its own it is counted on.
_IMAGINED_ID = 1
_IMAGINED_UUID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class HostTemplate:
    """``add``: ``count`` imagined root providers, each with these inventories:
    (class name, total, allocation_ratio); the other fields of each record take
    the defaults a new inventory record takes (reserved 0, units of 1 up to the
    most a record may hold)."""

    count: int
    inventories: tuple[tuple[str, int, float], ...]
    # As the client wrote it (the answer repeats it).
    text: str = ""


@dataclass(frozen=True)
class WhatIf:
    """The imagined cloud: these trees taken out, these hosts added."""

    exclude_roots: tuple[str, ...] = ()
    add: tuple[HostTemplate, ...] = ()


class RootCount(NamedTuple):
    """One root provider and how many fit in its tree (a tuple: there are
    thousands of them, and a frozen dataclass costs several times as much to
    build)."""

    uuid: str
    name: str | None
    # Consumers that fit in the tree (``count`` in the answer).
    consumers: int


@dataclass(frozen=True)
class Added:
    """What the hosts of one template take: ``each``, ``total`` for all of them."""

    template: HostTemplate
    each: int

    @property
    def total(self) -> int:
        return min(self.template.count * self.each, capacity.MAX_TOTAL)


@dataclass
class Headroom:
    """The answer: how many fit in all, per root, per aggregate, on added hosts."""

    total: int
    # Roots that take at least one, most first (then by name); the first
    # ``limit`` of them when the request has a limit (``total`` counts all).
    roots: list[RootCount]
    # aggregate uuid (as the request names it) -> count; None without member_of.
    aggregates: dict[str, int] | None = None
    added: list[Added] = field(default_factory=list)
    excluded_roots: tuple[str, ...] = ()
    # The count is the most that can fit (not only a greedy packing's).
    optimal: bool = True
    # Trees whose count stopped at ``MAX_ROUNDS`` walks.
    capped: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The body of GET /headroom."""
        body: dict[str, Any] = {
            "total": self.total,
            "optimal": self.optimal,
            "roots": [{"uuid": r.uuid, "name": r.name, "count": r.consumers}
                      for r in self.roots],
        }
        if self.aggregates is not None:
            body["aggregates"] = self.aggregates
        if self.excluded_roots:
            body["excluded_roots"] = list(self.excluded_roots)
        if self.added:
            body["added"] = [{"template": a.template.text, "hosts": a.template.count,
                              "each": a.each, "total": a.total} for a in self.added]
        if self.capped:
            body["capped"] = self.capped
        return body


# --- the overlay ---------------------------------------------------------------

class Usage:
    """What the placements counted so far take, over the providers' usage.

    The capacity rule is asked of ``provider(rp)``: the provider as it would
    be with that taken (its own records when nothing is). The providers
    themselves are never changed.
    """

    def __init__(self, providers: Mapping[int, Provider]) -> None:
        self.providers = providers
        self._shadows: dict[int, Provider] = {}

    def provider(self, rp: int) -> Provider:
        shadow = self._shadows.get(rp)
        return shadow if shadow is not None else self.providers[rp]

    def with_more(self, rp: int, more: Mapping[int, int]) -> Provider:
        """The provider as it would be with ``more`` (class -> amount) taken too."""
        provider = self.provider(rp)
        records = dict(provider.inventories)
        for rc, amount in more.items():
            records[rc] = records[rc].plus(amount)
        return Provider(provider.id, provider.uuid, provider.name, provider.parent,
                        provider.root, records, provider.traits, provider.aggregates)

    def take(self, candidate: Candidate, times: int) -> None:
        """Claim ``candidate`` ``times`` times over."""
        for rp, by_rc in candidate.allocations.items():
            self._shadows[rp] = self.with_more(
                rp, {rc: amount * times for rc, amount in by_rc.items()})


# --- counting --------------------------------------------------------------------

@dataclass
class _Tally:
    """Placements counted on one state."""

    by_root: dict[int, int] = field(default_factory=dict)
    by_aggregate: dict[int, int] = field(default_factory=dict)
    optimal: bool = True
    capped: int = 0
    # The providers read (the state's, or copies once the state was let go of).
    providers: Mapping[int, Provider] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return min(sum(self.by_root.values()), capacity.MAX_TOTAL)

    def add(self, root: int, aggregates: Iterable[int], times: int) -> None:
        self.by_root[root] = self.by_root.get(root, 0) + times
        self.add_aggregates(aggregates, times)

    def add_aggregates(self, aggregates: Iterable[int], times: int) -> None:
        for aggregate in aggregates:
            self.by_aggregate[aggregate] = self.by_aggregate.get(aggregate, 0) + times


def answer(db: Database, model: ReadModel | None, request: CandidateRequest,
           what_if: WhatIf | None = None, budget: Budget | None = None) -> Headroom:
    """``count`` on the state for this request (``model.state_for_request``).

    A count that may be large by its shape alone (``shape_bound``) takes its
    large-search slot first: refused for lack of one, it never takes the model.
    """
    what_if = what_if or WhatIf()
    budget = budget or Budget.unlimited()
    budget.admit(shape_bound(request, what_if,
                             model.providers_known if model is not None else 0))
    with state_for_request(db, model) as held:
        return count(held.state, request, what_if, budget, release=held.release)


def shape_bound(request: CandidateRequest, what_if: WhatIf, providers: int) -> int:
    """What a count may walk, known before the model is taken: the slots of the
    request (a granular group is one, each class of the unsuffixed group one)
    times the trees it may walk, the cloud's providers (as many as the model held
    last) and one per ``add`` template. Compared with ``candidates_large_entries``
    as the bound after matching is."""
    slots = sum(1 if group.suffix else max(len(group.resources), 1)
                for group in request.groups)
    return slots * (providers + len(what_if.add))


def count(state: State, request: CandidateRequest, what_if: WhatIf | None = None,
          budget: Budget | None = None, release: Callable[[], None] | None = None
          ) -> Headroom:
    """How many more consumers of ``request`` fit on ``state`` (as changed by
    ``what_if``), placed one after another as the module's docstring says.

    Raises what GET /allocation_candidates raises for the request (unknown
    names, the budget's refusals) and ``BadWhatIf``. ``release``, when given,
    lets go of ``state``: the spread path calls it once it has copied what it
    reads.
    """
    what_if = what_if or WhatIf()
    budget = budget or Budget.unlimited()
    excluded = _excluded_roots(state, what_if.exclude_roots)
    templates = [(template, _template_records(state, template)) for template in what_if.add]
    source = ModelSource(state)
    prepared = engine.prepare(source, request, budget)
    # member_of's aggregates, by uuid as named (read now: ``state`` may be let go of).
    named = {u: state.aggregate_ids.get(u) for group in request.groups
             for any_of in group.member_of for u in sorted(any_of)}
    wanted = {ident: u for u, ident in named.items() if ident is not None}
    added: list[Added] = []
    optimal = True
    if not prepared.possible:
        tally = _Tally()
        added = [Added(template, 0) for template, _ in templates]
    else:
        # The imagined hosts read only the names: kept, so that ``state`` may be
        # let go of before they are counted.
        names = _names(state) if templates else state
        tally = _pack(state, source, request, prepared, excluded, wanted, budget, release)
        optimal = tally.optimal
        if templates and release is not None:
            # What the answer reads of the real roots, then the model is let go
            # of: counting thousands of imagined hosts must not hold it.
            tally.providers = {rp: _copy(tally.providers[rp]) for rp in tally.by_root}
            release()
        for template, records in templates:
            imagined = _imagined_state(names, records)
            alone = _pack(imagined, ModelSource(imagined), request,
                          engine.prepare(ModelSource(imagined), request, budget),
                          set(), {}, budget, None)
            added.append(Added(template, alone.total))
            optimal = optimal and alone.optimal
    providers = tally.providers
    # Most first, then by name (unique; the id orders a nameless one); ``limit``
    # of them when the request has one.
    keyed = [(-n, providers[root].name or "", root) for root, n in tally.by_root.items() if n]
    limit = request.limit
    order = heapq.nsmallest(limit, keyed) if limit is not None and limit < len(keyed) \
        else sorted(keyed)
    roots = [RootCount(providers[root].uuid, providers[root].name, -negative)
             for negative, _, root in order]
    total = min(tally.total + sum(a.total for a in added), capacity.MAX_TOTAL)
    aggregates = None
    if named:
        aggregates = {u: tally.by_aggregate.get(ident, 0) if ident is not None else 0
                      for u, ident in named.items()}
    LOG.debug("headroom: %d in all, %d roots take some, %d on added hosts", total,
              len(roots), sum(a.total for a in added))
    return Headroom(total=total, roots=roots, aggregates=aggregates, added=added,
                    excluded_roots=what_if.exclude_roots, optimal=optimal,
                    capped=tally.capped)


def _pack(state: State, source: ModelSource, request: CandidateRequest,
          prepared: engine.Prepared, excluded: set[int], wanted: dict[int, str],
          budget: Budget, release: Callable[[], None] | None) -> _Tally:
    """Place consumers of ``request`` one after another on ``state`` until none fits."""
    if not prepared.possible:
        return _Tally(providers=state.providers)
    if prepared.single:
        return _single(state, source, prepared, excluded, wanted, budget)
    return _spread(state, source, request, prepared, excluded, wanted, budget, release)


def _single(state: State, source: ModelSource, prepared: engine.Prepared, excluded: set[int],
            wanted: dict[int, str], budget: Budget) -> _Tally:
    """Every candidate is one provider, and providers share nothing: each takes
    the least, over the requested classes, of what the capacity rule lets it
    take one after another."""
    group = prepared.groups[0]
    # Each one is its own root (no nested provider holds a requested class).
    found = source.single_holders(group, prepared.roots)
    budget.admit(len(found))
    if excluded:
        found = [provider for provider in found if provider.id not in excluded]
    # The least, over the classes, of what fits one after another (0: it does not
    # serve the request now: ``Fits.passes`` is ``times >= 1``).
    counts: list[int] = [0] * len(found)  # (a group without resources selects none)
    for index, (rc, amount) in enumerate(group.resources):
        each = rules.Fits(rc, amount).times_each(found)
        counts = list(map(min, counts, each)) if index else each
    tally = _Tally(providers=state.providers)
    tally.by_root = {provider.id: n for provider, n in zip(found, counts, strict=True) if n}
    if wanted:
        for provider in found:
            n = tally.by_root.get(provider.id)
            if n:
                tally.add_aggregates(provider.aggregates & wanted.keys(), n)
    LOG.debug("headroom, single path: %d providers hold the classes and pass the "
              "filters, %d consumers fit", len(found), tally.total)
    return tally


def _spread(state: State, source: ModelSource, request: CandidateRequest,
            prepared: engine.Prepared, excluded: set[int], wanted: dict[int, str],
            budget: Budget, release: Callable[[], None] | None) -> _Tally:
    """Tree after tree in the engine's order, the walk's first candidate claimed
    on the overlay until the tree has none."""
    laid_out = plan(source, prepared.groups, request, prepared.names, prepared.roots)
    providers: Mapping[int, Provider] = state.providers
    tally = _Tally(optimal=False, providers=providers)
    if laid_out is None:
        tally.optimal = True  # nothing fits at all: none is the most
        return tally
    facts = laid_out.facts
    budget.admit(len(laid_out.order) * len(laid_out.slots))
    if release is not None:
        # The walks may take long: copy the providers they read (a provider's
        # records are replaced, never changed, when the model changes; copying
        # costs less than one walk of each tree), then let the model go.
        needed = set(facts) | {f.root for f in facts.values()} | set(laid_out.order)
        providers = {rp: _copy(state.providers[rp]) for rp in needed}
        tally.providers = providers
        release()
    usage = Usage(providers)
    fits_of = [[rules.Fits(rc, amount) for rc, amount in slot.amounts]
               for slot in laid_out.slots]
    for anchor in laid_out.order:
        if anchor in excluded:
            continue
        slots, _ = laid_out.tree(anchor)
        if excluded:
            slots = [replace(slot, options=tuple(rp for rp in slot.options
                                                 if facts[rp].root not in excluded))
                     for slot in slots]
        if not _fill_tree(anchor, slots, fits_of, laid_out.rules, usage, tally, wanted,
                          budget):
            tally.capped += 1
            LOG.info("headroom: tree %s stopped after %d walks; its count so far stands",
                     providers[anchor].uuid, MAX_ROUNDS)
    LOG.debug("headroom, spread path: %d trees, %d consumers fit", len(laid_out.order),
              tally.total)
    # No candidate at all to begin with: none is the most.
    tally.optimal = tally.total == 0
    return tally


def _fill_tree(anchor: int, slots: list[Slot], fits_of: list[list[rules.Fits]],
               walk_rules: search.Rules, usage: Usage, tally: _Tally,
               wanted: dict[int, str], budget: Budget) -> bool:
    """Claim the tree's first candidate on ``usage`` until it has none (True), or
    until ``MAX_ROUNDS`` walks (False)."""
    for _ in range(MAX_ROUNDS):
        budget.step()
        slots = [_narrowed(slot, fits, usage) for slot, fits in zip(slots, fits_of, strict=True)]
        room = {(rp, rc): usage.provider(rp).inventories[rc].room
                for slot in slots for rp in slot.options for rc, _ in slot.amounts}
        first = next(search.tree_candidates(slots, replace(walk_rules, room=room),
                                            budget.step), None)
        if first is None:
            return True
        times = _times_first(first, slots, usage)
        if times < 1:  # cannot be (the walk found it fits): never count what does not
            LOG.warning("headroom: a candidate of tree %d does not fit its own amounts",
                        anchor)
            return True
        usage.take(first, times)
        root = _landing(anchor, first)
        tally.add(root, _aggregates_of(usage.providers, (*first.allocations, root), wanted),
                  times)
    return False


def _narrowed(slot: Slot, fits: list[rules.Fits], usage: Usage) -> Slot:
    """The slot with the options that still serve it alone (the capacity rule on
    the overlay; a resourceless slot keeps them all)."""
    if not fits:
        return slot
    kept = tuple(rp for rp in slot.options
                 if all(fit.passes(usage.provider(rp)) for fit in fits))
    return slot if len(kept) == len(slot.options) else replace(slot, options=kept)


def _times_first(candidate: Candidate, slots: list[Slot], usage: Usage) -> int:
    """How many times in a row ``candidate`` is the walk's first: while it fits and
    no slot loses an option.

    With the same options the walk goes in the same order, and rooms only
    shrink, so every candidate before this one still fails: it stays first
    while it fits. Both bounds are the capacity rule's closed form: it fits
    ``how_many`` times in all; a provider that gives ``x`` of a class in it
    stays an option of a slot that wants ``a`` of that class for ``how_many(x)``
    more claims on top of ``a`` (``plus(a)``), and the first claim is made
    whatever follows.
    """
    allocations = candidate.allocations
    times = min(usage.provider(rp).inventories[rc].how_many(x)
                for rp, by_rc in allocations.items() for rc, x in by_rc.items())
    for slot in slots:
        for rp in slot.options:
            taken = allocations.get(rp)
            if taken is None:
                continue
            records = usage.provider(rp).inventories
            for rc, amount in slot.amounts:
                x = taken.get(rc)
                if x:
                    times = min(times, 1 + records[rc].plus(amount).how_many(x))
    return times


def _landing(anchor: int, candidate: Candidate) -> int:
    """The root a placement counts for: the anchor tree when it takes from it,
    else the first root it takes from (sharing providers of other trees only)."""
    return anchor if anchor in candidate.roots else min(candidate.roots)


def _aggregates_of(providers: Mapping[int, Provider], rps: Iterable[int],
                   wanted: dict[int, str]) -> set[int]:
    """The aggregates named in member_of that any of ``rps`` is in."""
    if not wanted:
        return set()
    found: set[int] = set()
    for rp in rps:
        found |= providers[rp].aggregates & wanted.keys()
    return found


def _copy(provider: Provider) -> Provider:
    return Provider(provider.id, provider.uuid, provider.name, provider.parent,
                    provider.root, provider.inventories, provider.traits, provider.aggregates)


# --- the what-if ---------------------------------------------------------------------

def _excluded_roots(state: State, uuids: Iterable[str]) -> set[int]:
    """The ids of the roots ``exclude_roots`` names; each must be a root provider."""
    found = set()
    for uuid in uuids:
        rp = state.by_uuid.get(uuid)
        if rp is None:
            raise ExcludedRootNotFound(uuid)
        root = state.providers[rp].root
        if root != rp:
            raise ExcludedNotRoot(uuid, state.providers[root].uuid)
        found.add(rp)
    return found


def _class_id(state: State, name: str) -> int | None:
    """A class's id as the engine resolves it (``ModelSource.resolve``)."""
    return STANDARD_CLASS_IDS.get(name, state.class_ids.get(name))


def _template_records(state: State, template: HostTemplate
                      ) -> dict[int, capacity.InventoryWithUsage]:
    """The inventory records of one imagined host, by class id."""
    records = {}
    defaults = inventories.DEFAULTS
    for name, total, ratio in template.inventories:
        rc = _class_id(state, name)
        if rc is None:
            raise AddedClassNotFound(name)
        if not capacity.fits_in_range(total, defaults["reserved"], ratio):
            raise AddedCapacityOutOfRange(name, total, ratio, capacity.MAX_CAPACITY)
        records[rc] = capacity.with_usage(total, defaults["reserved"], defaults["min_unit"],
                                          defaults["max_unit"], defaults["step_size"],
                                          ratio, 0)
    return records


def _names(state: State) -> State:
    """A state holding only copies of the names of ``state`` (the model's own
    dicts change when it is brought up to date)."""
    return State(class_ids=dict(state.class_ids), class_names=dict(state.class_names),
                 trait_ids=dict(state.trait_ids), trait_names=dict(state.trait_names),
                 aggregate_ids=dict(state.aggregate_ids),
                 aggregate_uuids=dict(state.aggregate_uuids))


def _imagined_state(state: State, records: dict[int, capacity.InventoryWithUsage]) -> State:
    """A state holding one imagined root provider (no traits, no aggregates), with
    the names of ``state`` (shared, only read)."""
    host = Provider(_IMAGINED_ID, _IMAGINED_UUID, "imagined host", None, _IMAGINED_ID,
                    dict(records))
    return State(providers={host.id: host}, by_uuid={host.uuid: host.id},
                 holders={rc: {host.id} for rc in records}, trees={host.id: {host.id}},
                 class_ids=state.class_ids, class_names=state.class_names,
                 trait_ids=state.trait_ids, trait_names=state.trait_names,
                 aggregate_ids=state.aggregate_ids, aggregate_uuids=state.aggregate_uuids)
