"""Combining request groups into candidates, lazily, one tree at a time.

Pure functions over plain data (provider ids, class ids, amounts): no
state, no HTTP. The source has already found, with the rule book (``rules``), for
every request group the providers that can serve it on their own; here we
pick one provider per
*slot* so that everything fits together:

* a suffixed (granular) group is one slot: one provider serves all of it;
* the unsuffixed group is one slot per resource class: each class may come
  from a different provider of the tree (or a sharing provider).

For each anchor tree a depth-first search assigns slots in fail-first order
(fewest options first), checking as it goes the capacity of providers that
serve several slots, ``group_policy=isolate``, the pre-1.29 "one provider per
tree" rule, the unsuffixed group's required traits and ``same_subtree``.
Forward checking drops a branch as soon as a later slot has no option left,
and a cheap per-tree pre-check (capacity sums, an isolate matching) skips
trees that cannot work, so a tree with many identical children yields its
first candidates at once instead of enumerating permutations. Candidates
come out as a generator: the caller stops after ``limit`` of them.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class Slot:
    """One choice to make in a tree: which provider serves these amounts."""

    suffix: str
    # (class id, amount) taken from the chosen provider; empty for a
    # resourceless group (it only names a provider for the mappings).
    amounts: tuple[tuple[int, int], ...]
    options: tuple[int, ...]
    granular: bool


@dataclass(frozen=True)
class Rules:
    """Request-wide constraints and the provider facts they need."""

    # (provider, class) -> the most this candidate may take: the free
    # capacity, capped by max_unit (upstream's final capacity check).
    room: dict[tuple[int, int], int]
    isolate: bool = False
    # Before 1.29: two providers of one tree may not both give resources.
    one_provider_per_tree: bool = False
    root_of: dict[int, int] = field(default_factory=dict)
    # Unsuffixed group: trait bit masks; every mask must meet the union of
    # the traits of the providers chosen for its classes.
    unsuffixed_required: tuple[int, ...] = ()
    trait_bits: dict[int, int] = field(default_factory=dict)
    # Each set of suffixes must be served inside one provider's subtree.
    same_subtrees: tuple[frozenset[str], ...] = ()
    # provider -> itself and all its ancestors (only for same_subtree).
    ancestors: dict[int, frozenset[int]] = field(default_factory=dict)


class Candidate(NamedTuple):
    """One allocation request: what to take from whom, and who serves which group.

    A NamedTuple, not a frozen dataclass: the single-provider path makes
    thousands per request and this is several times cheaper to build.
    """

    allocations: dict[int, dict[int, int]]
    mappings: dict[str, tuple[int, ...]]
    # Roots of the providers in ``allocations`` (their trees are summarised).
    roots: tuple[int, ...] = ()

    def key(self) -> tuple:
        """Identity for de-duplication: the same claims and the same mappings."""
        return (frozenset((rp, rc, amount) for rp, by_rc in self.allocations.items()
                          for rc, amount in by_rc.items()),
                frozenset((suffix, frozenset(rps)) for suffix, rps in self.mappings.items()))


@dataclass(frozen=True)
class Shortfall:
    """Why a tree has no candidate (``shortfall``, or the walk that found none).

    ``filter`` as explain names it: ``combination`` (with ``class_id``: the
    groups want more of it than the tree's options give, or than fit one
    provider each), ``group_policy_isolate`` (at most ``fitting`` of the
    isolated groups get a provider of their own), ``same_subtree`` (no choice
    puts these groups in one subtree), ``required_trait`` (no choice has the
    unsuffixed group's traits together).
    """

    filter: str = "combination"
    suffixes: tuple[str, ...] = ()
    class_id: int | None = None
    requested: int = 0
    available: int = 0
    fitting: int = 0


def shortfall(slots: list[Slot], rules: Rules) -> Shortfall | None:
    """Cheap necessary conditions, checked before searching a tree: the first
    one the tree fails, or None."""
    if any(not slot.options for slot in slots):
        return Shortfall()
    demand: dict[int, int] = {}
    takers: dict[int, list[str]] = {}
    smallest: dict[int, int] = {}
    suppliers: dict[int, set[int]] = {}
    for slot in slots:
        for rc, amount in slot.amounts:
            demand[rc] = demand.get(rc, 0) + amount
            takers.setdefault(rc, []).append(slot.suffix)
            smallest[rc] = min(smallest.get(rc, amount), amount)
            suppliers.setdefault(rc, set()).update(slot.options)
    for rc, total in demand.items():
        if len(takers[rc]) == 1:
            continue  # the source kept only providers with room for it (rules.Fits)
        rooms = [max(rules.room.get((rp, rc), 0), 0) for rp in suppliers[rc]]
        suffixes = tuple(sorted(set(takers[rc])))
        if total > sum(rooms):
            LOG.debug("tree skipped: %d of class %d requested, %d available",
                      total, rc, sum(rooms))
            return Shortfall("combination", suffixes, rc, total, sum(rooms))
        # Each taker needs at least the smallest amount from one provider.
        fitting = sum(room // smallest[rc] for room in rooms)
        if len(takers[rc]) > fitting:
            LOG.debug("tree skipped: %d groups want class %d, too few fit", len(takers[rc]), rc)
            return Shortfall("combination", suffixes, rc, total, sum(rooms), fitting)
    if rules.isolate:
        granular = [slot for slot in slots if slot.granular]
        fitting = matching_size([slot.options for slot in granular]) \
            if len(granular) > 1 else len(granular)
        if fitting < len(granular):
            LOG.debug("tree skipped: %d isolated groups cannot get distinct providers",
                      len(granular))
            return Shortfall("group_policy_isolate",
                             tuple(slot.suffix for slot in granular), fitting=fitting)
    return None


def matching_size(option_lists: Sequence[Sequence[int]]) -> int:
    """Largest assignment of distinct providers to slots (augmenting paths)."""
    owner: dict[int, int] = {}

    def augment(slot: int, seen: set[int]) -> bool:
        for rp in option_lists[slot]:
            if rp in seen:
                continue
            seen.add(rp)
            if rp not in owner or augment(owner[rp], seen):
                owner[rp] = slot
                return True
        return False

    return sum(1 for slot in range(len(option_lists)) if augment(slot, set()))


def tree_candidates(slots: list[Slot], rules: Rules,  # noqa: C901 (closures, see below)
                    step: Callable[[], None] | None = None,
                    none_found: Callable[[Shortfall], None] | None = None
                    ) -> Iterator[Candidate]:
    """Every way to fill ``slots`` (one anchor tree) that meets ``rules``.

    ``step`` is called at every node of the walk (the request's budget:
    it raises to stop a search that has run too long). ``none_found``, when
    given, hears why a tree has no candidate (a trace for explain).
    """
    short = shortfall(slots, rules)
    if short is not None:
        if none_found is not None:
            none_found(short)
        return
    # Fail first: the slot with the fewest options decides earliest.
    slots = sorted(slots, key=lambda slot: len(slot.options))
    count = len(slots)
    option_sets = [frozenset(slot.options) for slot in slots]
    room = rules.room
    # The walk's state: what is taken from whom, who fills each position, the
    # providers of isolated groups, and (before 1.29) the one giver per tree.
    # Kept in the closures below, not an object: the walk's inner steps run at
    # every node, and cell variables are cheaper there than attributes.
    taken: dict[tuple[int, int], int] = {}
    chosen: list[int] = [0] * count
    isolated: set[int] = set()
    tree_giver: dict[int, list[int]] = {}  # root -> [provider, number of slots]

    unsuffixed_at = [i for i, slot in enumerate(slots) if not slot.granular]
    trait_check_at = unsuffixed_at[-1] if unsuffixed_at and rules.unsuffixed_required else -1
    subtree_checks = _subtree_checks(slots, rules.same_subtrees)

    def fits(pos: int, rp: int) -> bool:
        slot = slots[pos]
        if slot.granular and rules.isolate and rp in isolated:
            return False
        for rc, amount in slot.amounts:
            already = taken.get((rp, rc))
            if already and already + amount > room[(rp, rc)]:
                return False
        if rules.one_provider_per_tree and slot.amounts:
            giver = tree_giver.get(rules.root_of[rp])
            if giver is not None and giver[0] != rp:
                return False
        return True

    def place(pos: int, rp: int) -> None:
        slot = slots[pos]
        chosen[pos] = rp
        if slot.granular and rules.isolate:
            isolated.add(rp)
        for rc, amount in slot.amounts:
            taken[(rp, rc)] = taken.get((rp, rc), 0) + amount
        if rules.one_provider_per_tree and slot.amounts:
            giver = tree_giver.setdefault(rules.root_of[rp], [rp, 0])
            giver[1] += 1

    def unplace(pos: int, rp: int) -> None:
        slot = slots[pos]
        if slot.granular and rules.isolate:
            isolated.discard(rp)
        for rc, amount in slot.amounts:
            left = taken[(rp, rc)] - amount
            if left:
                taken[(rp, rc)] = left
            else:
                del taken[(rp, rc)]
        if rules.one_provider_per_tree and slot.amounts:
            root = rules.root_of[rp]
            giver = tree_giver[root]
            giver[1] -= 1
            if not giver[1]:
                del tree_giver[root]

    def later_slots_viable(pos: int, rp: int) -> bool:
        # Only slots that could use ``rp`` lost anything with this choice
        # (before 1.29 a choice also closes the rest of its tree: check all).
        for later in range(pos + 1, count):
            if not rules.one_provider_per_tree and rp not in option_sets[later]:
                continue
            if fits(later, rp):
                continue
            # Scan from the end: the early options are the ones in use.
            if not any(fits(later, other) for other in reversed(slots[later].options)):
                return False
        return True

    # Which of the checks below failed (for ``none_found``).
    failed: list[tuple[str, ...]] = []

    def checks_pass(pos: int) -> bool:
        if pos == trait_check_at:
            have = 0
            for i in unsuffixed_at:
                have |= rules.trait_bits.get(chosen[i], 0)
            if not all(have & mask for mask in rules.unsuffixed_required):
                failed.append(("",))
                return False
        for positions in subtree_checks.get(pos, ()):
            if not in_one_subtree({chosen[i] for i in positions}, rules.ancestors):
                failed.append(tuple(sorted({slots[i].suffix for i in positions})))
                return False
        return True

    suffix_positions = _suffix_positions(slots)
    root_of = rules.root_of
    made: dict[frozenset[tuple[tuple[int, int], int]],
               tuple[dict[int, dict[int, int]], tuple[int, ...]]] = {}

    # The walk, depth first, options in order: a loop over an explicit stack
    # (``tried``: how far each position has gone through its options), not
    # recursive generators, through which every candidate would climb back
    # up one frame per slot.
    if step is not None:
        step()
    if not count:
        yield _candidate(taken, chosen, suffix_positions, root_of, made)
        return
    found = False
    options = [slot.options for slot in slots]
    tried = [0] * count
    last = count - 1
    pos = 0
    while pos >= 0:
        here = options[pos]
        index = tried[pos]
        placed = False
        while index < len(here):
            rp = here[index]
            index += 1
            if not fits(pos, rp):
                continue
            place(pos, rp)
            # Looking ahead from the last but one position would only repeat
            # what the last position's own loop finds out.
            if checks_pass(pos) and (pos >= last - 1 or later_slots_viable(pos, rp)):
                placed = True
                break
            unplace(pos, rp)
        if not placed:
            tried[pos] = 0
            pos -= 1
            if pos >= 0:
                unplace(pos, chosen[pos])
            continue
        tried[pos] = index
        if step is not None:
            step()
        if pos == last:
            found = True
            yield _candidate(taken, chosen, suffix_positions, root_of, made)
            unplace(pos, rp)
        else:
            pos += 1
    if not found and none_found is not None:
        none_found(_walk_shortfall(failed))


def _walk_shortfall(failed: list[tuple[str, ...]]) -> Shortfall:
    """Why a walk found nothing: a same_subtree rule that failed, else the
    unsuffixed group's traits, else no combination at all."""
    subtree = next((suffixes for suffixes in failed if suffixes != ("",)), None)
    if subtree is not None:
        return Shortfall("same_subtree", subtree)
    if failed:
        return Shortfall("required_trait", ("",))
    return Shortfall()


def _subtree_checks(slots: list[Slot], same_subtrees: tuple[frozenset[str], ...]
                    ) -> dict[int, list[list[int]]]:
    """For each same_subtree rule of more than one slot, its slots' positions,
    under the last of them (where the walk has chosen them all)."""
    checks: dict[int, list[list[int]]] = {}
    for suffixes in same_subtrees:
        positions = [i for i, slot in enumerate(slots) if slot.suffix in suffixes]
        if len(positions) > 1:
            checks.setdefault(positions[-1], []).append(positions)
    return checks


def _suffix_positions(slots: list[Slot]) -> list[tuple[str, list[int]]]:
    """Each suffix with the positions of its slots (one for a granular group)."""
    by_suffix: dict[str, list[int]] = {}
    for pos, slot in enumerate(slots):
        by_suffix.setdefault(slot.suffix, []).append(pos)
    return list(by_suffix.items())


def _candidate(taken: dict[tuple[int, int], int], chosen: list[int],
               suffix_positions: list[tuple[str, list[int]]],
               root_of: dict[int, int],
               made: dict[frozenset[tuple[tuple[int, int], int]],
                          tuple[dict[int, dict[int, int]], tuple[int, ...]]]) -> Candidate:
    """The candidate of a complete walk: ``taken`` by provider, the providers
    ``chosen`` per suffix, and their roots.

    Candidates that take the same amounts from the same providers (they
    differ in which group each serves) share one ``allocations`` dict, kept
    in ``made``: identical groups on interchangeable devices make thousands
    of them, and the JSON writer writes a shared one once. Nobody changes a
    candidate's ``allocations``.
    """
    # Called once per candidate: tens of thousands of times for wide trees.
    key = frozenset(taken.items())
    found_before = made.get(key)
    if found_before is None:
        allocations: dict[int, dict[int, int]] = {}
        for (rp, rc), amount in taken.items():
            found = allocations.get(rp)
            if found is None:
                allocations[rp] = {rc: amount}
            else:
                found[rc] = amount
        roots = {root_of.get(rp, rp) for rp in allocations}
        found_before = made[key] = (
            allocations, (roots.pop(),) if len(roots) == 1 else tuple(sorted(roots)))
    mappings = {suffix: (chosen[positions[0]],) if len(positions) == 1
                else tuple(sorted({chosen[p] for p in positions}))
                for suffix, positions in suffix_positions}
    return Candidate(found_before[0], mappings, found_before[1])


def ancestors(parents: Mapping[int, int | None]) -> dict[int, frozenset[int]]:
    """Each provider of ``parents`` (provider -> its parent) with all its
    ancestors, itself included: what ``same_subtree`` is judged by."""
    found: dict[int, frozenset[int]] = {}
    for start in parents:
        chain: list[int] = []
        rp: int | None = start
        while rp is not None and rp not in found and rp not in chain:
            chain.append(rp)
            rp = parents.get(rp)
        above = found.get(rp, frozenset()) if rp is not None else frozenset()
        for member in reversed(chain):
            above = above | {member}
            found[member] = above
    return found


def in_one_subtree(providers: set[int], ancestors: dict[int, frozenset[int]]) -> bool:
    """True when one of ``providers`` is an ancestor (or self) of all the others."""
    if len(providers) == 1:
        return True
    common = frozenset.intersection(*(ancestors[rp] for rp in providers))
    return bool(common & providers)


def round_robin(iterators: Iterable[Iterator[Candidate]]) -> Iterator[Candidate]:
    """First candidate of every tree, then the second of every tree, ..."""
    active = list(iterators)
    while active:
        still = []
        for iterator in active:
            item = next(iterator, None)
            if item is not None:
                yield item
                still.append(iterator)
        active = still


def generate(anchors: Iterable[int], make_tree: Callable[[int], Iterator[Candidate]],
             breadth_first: bool) -> Iterator[Candidate]:
    """All trees' candidates, root by root (depth-first) or interleaved."""
    if breadth_first:
        return round_robin(make_tree(anchor) for anchor in anchors)
    return itertools.chain.from_iterable(make_tree(anchor) for anchor in anchors)


def unique(candidates: Iterable[Candidate]) -> Iterator[Candidate]:
    """Drop repeats: a sharing provider's offer reached from several trees."""
    seen: set[tuple] = set()
    for candidate in candidates:
        key = candidate.key()
        if key not in seen:
            seen.add(key)
            yield candidate


def select(candidates: Iterator[Candidate], limit: int | None, max_candidates: int,
           rng: random.Random | None) -> list[Candidate]:
    """Apply ``max_allocation_candidates``, ``limit`` and randomisation.

    ``candidates`` is already in generation order (with a shuffled tree and
    option order when ``rng`` is given). Without a cap we stop after
    ``limit``; with a cap we draw ``limit`` at random from the capped pool,
    as upstream does.
    """
    if max_candidates >= 0:
        pool = list(itertools.islice(candidates, max_candidates))
        if rng is not None and limit is not None and limit < len(pool):
            return rng.sample(pool, limit)
    else:
        pool = list(itertools.islice(candidates, limit) if limit else candidates)
    if limit is not None:
        pool = pool[:limit]
    if rng is not None:
        rng.shuffle(pool)
    return pool
