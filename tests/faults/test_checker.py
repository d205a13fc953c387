"""The checker's own rules, on histories written by hand (no cluster needed)."""

from __future__ import annotations

from tests.faults.checker import _in_order, _recorded_states, _runs, admissible_states
from tests.faults.history import Answer, History

A = {"rp-a": 2}
B = {"rp-b": 2}


def _history(*steps: tuple[str, str, dict, Answer]) -> History:
    history = History()
    for kind, consumer, target, answer in steps:
        operation = history.invoke(kind, "s1", consumer, {},
                                   None if kind == "settle_read" else target)
        history.complete(operation, answer)
    return history


OK = Answer("ok", 200)
LOST_AT_COMMIT = Answer("unavailable", 503, retry_after=True)


def _read(held: dict) -> Answer:
    return Answer("ok", 200, {"allocations": {rp: {"resources": {"VCPU": n}}
                                              for rp, n in held.items()}})


def test_an_uncertain_write_leaves_both_states_admissible() -> None:
    found = admissible_states(_history(("claim", "c1", A, OK),
                                       ("move", "c1", B, LOST_AT_COMMIT)))
    assert found.states["c1"] == [A, B]
    assert found.uncertain["c1"].target == B


def test_a_settling_read_resolves_the_uncertain_write() -> None:
    found = admissible_states(_history(("claim", "c1", A, OK),
                                       ("move", "c1", B, LOST_AT_COMMIT),
                                       ("settle_read", "c1", {}, _read(B)),
                                       ("release", "c1", {}, OK)))
    assert found.states["c1"] == [{}]
    assert "c1" not in found.uncertain
    assert found.settled["c1"][1] is True  # the move was applied
    assert found.acknowledged["c1"] == [{}, A, B, {}]
    assert not found.misread


def test_a_read_of_a_state_nobody_wrote_is_reported() -> None:
    found = admissible_states(_history(("claim", "c1", A, OK),
                                       ("settle_read", "c1", {}, _read(B))))
    assert found.misread and "c1" in found.misread[0]


def test_recorded_history_merges_a_transaction_and_keeps_order() -> None:
    rows = [("c1", "rp-a", 2, 7, 1.0, 1),   # claim A
            ("c1", "rp-a", 0, 9, 2.0, 2),   # move A -> B in one transaction
            ("c1", "rp-b", 2, 9, 2.0, 3),
            ("c1", "rp-b", 0, None, 3.0, 4)]  # an outside writer's delete
    assert _recorded_states(rows)["c1"] == [{}, A, B, {}]


def test_acknowledged_states_must_appear_in_order_in_the_history() -> None:
    recorded = [{}, A, B, {}]
    assert _in_order(_runs([{}, A, B, {}]), recorded)
    assert _in_order(_runs([{}, B, {}]), recorded)  # an unrecorded read is no gap
    assert not _in_order(_runs([{}, B, A]), recorded)  # out of order
    assert not _in_order(_runs([{}, {"rp-c": 1}]), recorded)  # never recorded


def test_a_500_is_reported_with_the_exception_the_server_logged(tmp_path) -> None:
    from types import SimpleNamespace

    from tests.faults import cloud as clouds

    log = tmp_path / "server.log"
    log.write_text(
        "2026-12-05 14:13:13.017 13257 INFO allotment.http.requestlog [None req-1] "
        '127.0.0.1 "GET /allocation_candidates" status: 200\n'
        "2026-12-05 14:13:14.054 13257 ERROR allotment.http.errors [None req-2 admin] "
        "Uncaught exception serving GET /allocation_candidates: "
        "sqlalchemy.exc.OperationalError: (pymysql.err.OperationalError) (1047, 'WSREP')\n"
        "[SQL: SELECT 1]\n"
        "2026-12-05 14:13:14.054 13257 ERROR allotment.http.errors Traceback (most recent...\n")
    server = SimpleNamespace(name="allotment2", running=SimpleNamespace(log_path=log))
    cloud = SimpleNamespace(servers=[server, SimpleNamespace(
        name="allotment3", running=SimpleNamespace(log_path=tmp_path / "absent.log"))])
    assert clouds.server_errors(cloud) == [  # type: ignore[arg-type]
        "allotment2: GET /allocation_candidates: sqlalchemy.exc.OperationalError: "
        "(pymysql.err.OperationalError) (1047, 'WSREP')"]
