"""bench/history_cost.py compares a claim with the history and without it, for real.

Its two variants must differ in the history and in nothing else a client
sees: each boots a few instances through the API (new, resized, deleted),
every request answered as nova expects; the variant with the history
recorded every allocation change as allotment's, and the one without it
recorded nothing (its triggers dropped, its write context off). The bench's
own entry point then runs a few interleaved boots end to end. On PostgreSQL
and MariaDB, the databases the bench compares on.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from tests import conftest
from tests.support.bench import bench_module

BACKENDS = [backend for backend in conftest._backends() if backend != "sqlite"]


def _history_cost() -> ModuleType:
    return bench_module("history_cost")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_variants_differ_in_the_history_only(backend: str) -> None:
    bench = _history_cost()
    variants = [bench.Variant(backend, history, providers=2) for history in (True, False)]
    try:
        for variant in variants:
            for index in range(3):
                variant.boot(index)  # asserts each request's status itself
        recorded = {}
        for variant in variants:
            with variant.engine.connect() as conn:
                recorded[variant.history] = (
                    conn.exec_driver_sql(
                        "SELECT COUNT(*) FROM allotment_allocation_history").scalar_one(),
                    conn.exec_driver_sql(
                        "SELECT COUNT(*) FROM allotment_allocation_history "
                        "WHERE writer = 'allotment'").scalar_one(),
                    conn.exec_driver_sql("SELECT COUNT(*) FROM allocations").scalar_one())
        # Three boots of three classes: created, resized, deleted; none left.
        with_history, without = recorded[True], recorded[False]
        assert with_history[0] > 0 and with_history[1] == with_history[0], recorded
        assert without[0] == 0, recorded
        assert with_history[2] == without[2] == 0, recorded
    finally:
        for variant in variants:
            variant.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bench_runs_end_to_end(backend: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _history_cost().main(["--db", backend, "--providers", "2", "--boots", "4"]) == 0
    out = capsys.readouterr().out
    assert "with history: median" in out and "without history: median" in out, out
    assert "history costs" in out, out
