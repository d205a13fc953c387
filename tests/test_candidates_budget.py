"""What one candidates search may cost (``allotment.candidates.budget``).

Through HTTP on the three databases (read model and tables): an answer too
large for the budget is a 400 that says how to narrow the query, a search
that may be large is refused with 503 while the worker's large-search slots
are taken, a search out of time is a 400; cheap requests pass through all of
it. The budget's own rules are checked with a clock of the test's.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from allotment import memory
from allotment.candidates import budget as budget_module
from allotment.candidates.budget import Budget, Limits, Slots, bounded_product
from allotment.ledger import errors
from tests.conftest import make_conf

CLASS = "CUSTOM_BUDGET_UNIT"


def _cloud(client, children: int) -> str:
    """A root with VCPU and ``children`` children of one unit of CLASS each."""
    assert client.put(f"/resource_classes/{CLASS}", version="1.7").status in (201, 204)
    root = str(uuid.uuid4())
    assert client.post("/resource_providers", {"name": "root", "uuid": root},
                       version="1.39").status == 200
    assert client.put(f"/resource_providers/{root}/inventories", {
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}}
    ).status == 200
    for index in range(children):
        child = str(uuid.uuid4())
        assert client.post("/resource_providers", {
            "name": f"child-{index}", "uuid": child, "parent_provider_uuid": root},
            version="1.39").status == 200
        assert client.put(f"/resource_providers/{child}/inventories", {
            "resource_provider_generation": 0, "inventories": {CLASS: {"total": 1}}}
        ).status == 200
    return root


def _query(groups: int, limit: int | None = None, path: str = "/allocation_candidates") -> str:
    parts = [f"resources{i}={CLASS}:1" for i in range(1, groups + 1)] + ["group_policy=none"]
    if limit is not None:
        parts.append(f"limit={limit}")
    return path + "?" + "&".join(parts)


@pytest.fixture(params=["model", "database"])
def conf(request, database):
    return make_conf(database.url, allotment__candidates_source=request.param,
                     allotment__candidates_max_entries=2000,
                     allotment__candidates_large_entries=500)


def test_an_answer_over_the_budget_is_a_400_that_says_how_to_narrow_it(client) -> None:
    _cloud(client, 8)
    # 8 x 7 x 6 x 5 = 1,680 candidates of 4 entries: 6,720 entries > 2,000.
    for path in ("/allocation_candidates", "/explain/allocation_candidates"):
        refused = client.get(_query(4, path=path), version="1.39")
        assert refused.status == 400, refused
        assert refused.error_code == "placement.query.bad_value"
        assert "more than 2000 allocation entries" in refused.detail
        assert "limit=N" in refused.detail
    # The same request under a limit, and a smaller one whole, are answered.
    limited = client.get(_query(4, limit=10), version="1.39")
    assert limited.status == 200, limited
    assert len(limited.json()["allocation_requests"]) == 10
    whole = client.get(_query(3), version="1.39")  # 336 candidates, 1,008 entries
    assert whole.status == 200, whole
    assert len(whole.json()["allocation_requests"]) == 8 * 7 * 6


def test_a_large_search_waits_for_no_slot_it_is_refused_while_they_are_taken(
        client, monkeypatch: pytest.MonkeyPatch) -> None:
    _cloud(client, 8)
    monkeypatch.setattr(Slots, "take", lambda self: False)  # every slot taken
    busy = client.get(_query(3), version="1.39")  # bound 8^3 x 3 entries > 500
    assert busy.status == 503, busy
    assert busy.headers["retry-after"] == "1"
    assert "large allocation candidates requests" in busy.detail
    # Cheap requests never need a slot: a limit, or a small bound.
    assert client.get(_query(3, limit=20), version="1.39").status == 200
    assert client.get(_query(1), version="1.39").status == 200
    assert client.get("/allocation_candidates?resources=VCPU:1", version="1.39").status == 200


def test_a_search_out_of_time_is_a_400(database) -> None:
    from allotment.wsgi import make_app
    from tests.support.client import PlacementClient

    # No entry budget to speak of: only the clock stops 10! candidates.
    conf = make_conf(database.url, allotment__candidates_max_entries=10**9,
                     allotment__candidates_large_entries=10**9,
                     allotment__candidates_time_limit=1, allotment__candidates_grace=60)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    _cloud(client, 10)
    started = time.monotonic()
    refused = client.get(_query(10), version="1.39")
    assert refused.status == 400, refused
    assert "within 1 seconds" in refused.detail
    assert time.monotonic() - started < 10


def test_a_large_search_lets_go_of_the_read_model_while_it_walks(database) -> None:
    """Cheap requests of the same worker are answered while a large one runs."""
    from allotment.wsgi import make_app
    from tests.support.client import PlacementClient

    conf = make_conf(database.url, allotment__candidates_max_entries=10**9,
                     allotment__candidates_time_limit=2, allotment__candidates_grace=60)
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    _cloud(client, 10)
    assert client.get("/allocation_candidates?resources=VCPU:1", version="1.39").status == 200
    large: list = []
    walking = threading.Event()

    def still_connected() -> bool:
        # The budget asks the server whether the client is gone every few hundred
        # steps of the walk: the first question says the walk has begun.
        walking.set()
        return False

    runner = threading.Thread(target=lambda: large.append(client.get(
        _query(10), version="1.39",
        environ={"waitress.client_disconnected": still_connected})))
    runner.start()
    try:
        assert walking.wait(timeout=30), "the large search never began its walk"
        assert runner.is_alive()
        started = time.monotonic()
        cheap = client.get("/allocation_candidates?resources=VCPU:1", version="1.39")
        waited = time.monotonic() - started
        assert cheap.status == 200
        assert runner.is_alive(), "the large search ended first: nothing was shown"
        assert waited < 2.0, waited
    finally:
        runner.join(timeout=30)
    assert large and large[0].status == 400  # out of time


# --- the budget's rules, with the test's clock ----------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _steps(budget: Budget, count: int) -> None:
    for _ in range(count):
        budget.step()


def test_time_is_checked_every_few_hundred_steps() -> None:
    clock = Clock()
    budget = Budget(Limits(time_limit=5.0, grace=100.0), Slots(1), clock=clock)
    _steps(budget, 10_000)
    clock.now += 5.1
    with pytest.raises(errors.CandidatesTooSlow):
        _steps(budget, 1000)


def test_a_slow_search_without_a_slot_takes_one_after_the_grace_time() -> None:
    clock = Clock()
    slots = Slots(1)
    budget = Budget(Limits(grace=1.0), slots, clock=clock)
    clock.now += 1.5
    _steps(budget, 1000)
    assert budget.holding
    other = Budget(Limits(grace=1.0), slots, clock=clock)
    clock.now += 1.5
    with pytest.raises(errors.CandidatesBusy):
        _steps(other, 1000)
    budget.close()
    assert slots.take()  # given back


def test_admit_takes_a_slot_only_for_a_large_bound() -> None:
    slots = Slots(1)
    small = Budget(Limits(large_entries=100), slots)
    small.admit(100)
    assert not small.holding
    large = Budget(Limits(large_entries=100), slots)
    large.admit(101)
    assert large.holding
    with pytest.raises(errors.CandidatesBusy):
        Budget(Limits(large_entries=100), slots).admit(10**9)
    large.close()
    large.close()  # once only
    Budget(Limits(large_entries=100), slots).admit(10**9)


def test_entries_are_counted_as_candidates_are_taken() -> None:
    budget = Budget(Limits(max_entries=10))
    taken = list(budget.metered([1, 2, 3, 4], size=lambda n: n))
    assert taken == [1, 2, 3, 4] and budget.entries == 10
    with pytest.raises(errors.TooManyCandidates):
        budget.spend(1)


def test_a_client_that_has_gone_stops_the_search() -> None:
    gone = [False]
    budget = Budget(Limits(), Slots(1), client_gone=lambda: gone[0])
    _steps(budget, 2000)
    gone[0] = True
    with pytest.raises(errors.ClientGone):
        _steps(budget, 1000)


def test_bounded_product_stops_counting_past_the_cap() -> None:
    assert bounded_product([2, 3, 4], 100) == 24
    assert bounded_product([10] * 1000, 100) == 101
    assert bounded_product([], 5) == 1


def test_large_answers_give_their_memory_back() -> None:
    trims: list[int] = []
    done = threading.Event()

    def trim(pad: int) -> int:
        trims.append(pad)
        done.set()
        return 1

    trimmer = memory.Trimmer(trim=trim, delay=0.01)
    small = Budget(Limits(), trimmer=trimmer)
    small.spend(100)
    small.close()
    large = Budget(Limits(), trimmer=trimmer)
    large.spend(budget_module.TRIM_AFTER_ENTRIES + 1)
    large.close()
    assert done.wait(5)
    assert trims == [0]


def test_the_clock_is_looked_at_every_so_many_steps() -> None:
    now = [0.0]
    budget = Budget(Limits(time_limit=1.0), Slots(1), clock=lambda: now[0],
                    steps_between_checks=3)
    now[0] = 2.0
    budget.step()
    budget.step()  # not looked at yet
    with pytest.raises(errors.CandidatesTooSlow):
        budget.step()
