"""The candidate search on plain data (no database): allotment.candidates.search."""

import itertools
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from allotment.candidates.search import (
    Candidate,
    Rules,
    Shortfall,
    Slot,
    generate,
    in_one_subtree,
    round_robin,
    select,
    shortfall,
    tree_candidates,
    unique,
)

VGPU = 1
VCPU = 0


def gpu_slots(groups: int, devices: list[int], granular: bool = True) -> list[Slot]:
    return [Slot(f"_{i}", ((VGPU, 1),), tuple(devices), granular) for i in range(groups)]


def keys(candidates) -> set:
    return {c.key() for c in candidates}


def test_isolate_and_capacity():
    room = {(10, VGPU): 2, (11, VGPU): 1}
    slots = gpu_slots(2, [10, 11])
    found = list(tree_candidates(slots, Rules(room=room)))
    # Both on 10 (room 2) or split; never both on 11 (room 1).
    assert sorted(str(sorted(c.allocations.items())) for c in found) == sorted([
        str([(10, {VGPU: 1}), (11, {VGPU: 1})]), str([(10, {VGPU: 1}), (11, {VGPU: 1})]),
        str([(10, {VGPU: 2})])])
    assert {tuple(sorted(c.mappings.items())) for c in found} == {
        (("_0", (10,)), ("_1", (10,))), (("_0", (10,)), ("_1", (11,))),
        (("_0", (11,)), ("_1", (10,)))}
    isolated = list(tree_candidates(slots, Rules(room=room, isolate=True)))
    assert len(isolated) == 2 and all(len(c.allocations) == 2 for c in isolated)


def test_unsuffixed_traits_and_one_provider_per_tree():
    # Unsuffixed VCPU from 1 or 2, VGPU from 3; trait bit 1 only on 2.
    slots = [Slot("", ((VCPU, 1),), (1, 2), False), Slot("", ((VGPU, 1),), (3,), False)]
    room = {(1, VCPU): 4, (2, VCPU): 4, (3, VGPU): 4}
    rules = Rules(room=room, unsuffixed_required=(1,), trait_bits={2: 1},
                  root_of={1: 1, 2: 1, 3: 1})
    (only,) = tree_candidates(slots, rules)
    assert only.allocations == {2: {VCPU: 1}, 3: {VGPU: 1}}
    assert only.mappings == {"": (2, 3)} and only.roots == (1,)
    old = Rules(room=room, one_provider_per_tree=True, root_of={1: 1, 2: 1, 3: 1})
    assert list(tree_candidates(slots, old)) == []


def test_same_subtree():
    ancestors = {1: frozenset({1}), 2: frozenset({1, 2}), 3: frozenset({1, 3}),
                 4: frozenset({1, 2, 4})}
    assert in_one_subtree({2, 4}, ancestors)
    assert in_one_subtree({4}, ancestors)
    assert not in_one_subtree({3, 4}, ancestors)
    assert in_one_subtree({1, 3, 4}, ancestors)
    slots = [Slot("_A", (), (2, 3), True), Slot("_B", ((VGPU, 1),), (4,), True)]
    rules = Rules(room={(4, VGPU): 1}, same_subtrees=(frozenset({"_A", "_B"}),),
                  ancestors=ancestors)
    (only,) = tree_candidates(slots, rules)
    assert only.mappings == {"_A": (2,), "_B": (4,)} and only.allocations == {4: {VGPU: 1}}


def test_prechecks_say_why_a_tree_has_no_candidate():
    room = {(d, VGPU): 1 for d in range(8)}
    assert shortfall(gpu_slots(8, list(range(8))), Rules(room=room)) is None
    nine = gpu_slots(9, list(range(8)))
    suffixes = tuple(sorted(slot.suffix for slot in nine))
    assert shortfall(nine, Rules(room=room)) == Shortfall(
        "combination", suffixes, VGPU, requested=9, available=8)
    big = {(d, VGPU): 4 for d in range(8)}
    assert shortfall(nine, Rules(room=big)) is None
    assert shortfall(nine, Rules(room=big, isolate=True)) == Shortfall(
        "group_policy_isolate", tuple(slot.suffix for slot in nine), fitting=8)
    assert shortfall([Slot("", ((VCPU, 1),), (), False)], Rules(room={})) == Shortfall()


def test_a_walk_without_candidates_says_which_check_failed():
    ancestors = {1: frozenset({1}), 2: frozenset({1, 2}), 3: frozenset({1, 3})}
    slots = [Slot("_A", ((VGPU, 1),), (2,), True), Slot("_B", ((VGPU, 1),), (3,), True)]
    heard: list[Shortfall] = []
    rules = Rules(room={(2, VGPU): 1, (3, VGPU): 1},
                  same_subtrees=(frozenset({"_A", "_B"}),), ancestors=ancestors)
    assert list(tree_candidates(slots, rules, none_found=heard.append)) == []
    assert heard == [Shortfall("same_subtree", ("_A", "_B"))]
    heard.clear()
    assert len(list(tree_candidates(slots, Rules(room=rules.room),
                                    none_found=heard.append))) == 1
    assert heard == []


def test_wide_trees_yield_the_first_candidates_lazily():
    for devices, groups in ((8, 6), (16, 8)):
        room = {(d, VGPU): 1 for d in range(devices)}
        first = list(itertools.islice(
            tree_candidates(gpu_slots(groups, list(range(devices))), Rules(room=room)), 1000))
        assert len(first) == 1000 and len(keys(first)) == 1000
        assert all(len(c.allocations) == groups for c in first)
        # Enough in total (3 per device) but each device fits one group of 2.
        pairs = [Slot(f"_{i}", ((VGPU, 2),), tuple(range(devices)), True)
                 for i in range(devices + 1)]
        assert list(tree_candidates(pairs, Rules(room={k: 3 for k in room}))) == []


slot_lists = st.lists(
    st.tuples(st.booleans(), st.sampled_from([VCPU, VGPU]), st.integers(1, 2),
              st.sets(st.integers(1, 5), min_size=1, max_size=4)),
    min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(slot_specs=slot_lists, rooms=st.dictionaries(
    st.tuples(st.integers(1, 5), st.sampled_from([VCPU, VGPU])), st.integers(0, 4)),
    isolate=st.booleans(), old=st.booleans())
def test_search_matches_brute_force(slot_specs, rooms, isolate, old):
    # The unsuffixed group has one slot per class.
    unsuffixed = {rc: spec for spec in slot_specs if not spec[0] for rc in [spec[1]]}
    slot_specs = [spec for spec in slot_specs if spec[0]] + list(unsuffixed.values())
    slots = [Slot(f"_{i}" if granular else "", ((rc, amount),), tuple(sorted(options)), granular)
             for i, (granular, rc, amount, options) in enumerate(slot_specs)]
    # Only options with room for their own amount reach the search.
    room = {(rp, rc): rooms.get((rp, rc), 3) for rp in range(1, 6) for rc in (VCPU, VGPU)}
    slots = [Slot(s.suffix, s.amounts, tuple(rp for rp in s.options
                                             if room[(rp, s.amounts[0][0])] >= s.amounts[0][1]),
                  s.granular) for s in slots]
    root_of = {rp: 100 + rp % 2 for rp in range(1, 6)}
    rules = Rules(room=room, isolate=isolate, one_provider_per_tree=old, root_of=root_of)
    expected = set()
    for combo in itertools.product(*(s.options for s in slots)):
        taken: dict = {}
        for slot, rp in zip(slots, combo, strict=True):
            for rc, amount in slot.amounts:
                taken[(rp, rc)] = taken.get((rp, rc), 0) + amount
        if any(amount > room[key] for key, amount in taken.items()):
            continue
        granular = [rp for slot, rp in zip(slots, combo, strict=True) if slot.granular]
        if isolate and len(set(granular)) != len(granular):
            continue
        givers = {rp for rp, _ in taken}
        if old and len({root_of[rp] for rp in givers}) != len(givers):
            continue
        mappings: dict = {}
        for slot, rp in zip(slots, combo, strict=True):
            mappings.setdefault(slot.suffix, set()).add(rp)
        expected.add((frozenset((rp, rc, a) for (rp, rc), a in taken.items()),
                      frozenset((s, frozenset(r)) for s, r in mappings.items())))
    found = list(tree_candidates(slots, rules))
    assert len(found) == len(keys(found))
    assert keys(found) == expected


def candidate(n: int) -> Candidate:
    return Candidate({n: {VCPU: 1}}, {"": (n,)}, (n,))


def test_generation_orders_and_selection():
    trees = {1: [candidate(1), candidate(2)], 2: [candidate(3)], 3: [candidate(4), candidate(5)]}

    def make(anchor):
        return iter(trees[anchor])

    depth = [c.mappings[""][0] for c in generate([1, 2, 3], make, breadth_first=False)]
    assert depth == [1, 2, 3, 4, 5]
    breadth = [c.mappings[""][0] for c in generate([1, 2, 3], make, breadth_first=True)]
    assert breadth == [1, 3, 4, 2, 5]
    assert [c.mappings[""][0] for c in round_robin([iter([])])] == []
    repeated = [candidate(1), candidate(1), candidate(2)]
    assert [c.mappings[""][0] for c in unique(repeated)] == [1, 2]

    def picked(limit, cap, rng=None):
        return [c.mappings[""][0] for c in select(iter(candidate(n) for n in range(10)),
                                                    limit, cap, rng)]

    assert picked(None, -1) == list(range(10))
    assert picked(3, -1) == [0, 1, 2]
    assert picked(None, 4) == [0, 1, 2, 3]
    assert picked(5, 2) == [0, 1]
    sample = picked(2, 4, random.Random(1))
    assert len(sample) == 2 and set(sample) <= {0, 1, 2, 3}
    assert sorted(picked(None, -1, random.Random(1))) == list(range(10))


def test_generation_is_lazy():
    made = []

    def make(anchor):
        made.append(anchor)
        return iter([candidate(anchor)])

    assert len(select(generate(range(1000), make, False), 5, -1, None)) == 5
    assert made == [0, 1, 2, 3, 4]
