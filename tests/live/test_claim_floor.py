"""bench/claim_floor.py sends a claim's work and nothing else, from the database's own client.

A floor that skipped part of a claim, or whose triggers were not what it
says, would make every comparison with it wrong: each variant runs briefly
on both servers and the database is then read back. Every claim left one
consumer, its three allocation rows and one more generation on its
provider; with allotment's triggers the history recorded each row, and with
them off nothing did.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests import conftest

BENCH = Path(__file__).resolve().parents[2] / "bench"
BACKENDS = [backend for backend in conftest._backends() if backend != "sqlite"]


def _claim_floor() -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("claim_floor")


@pytest.mark.parametrize("triggers", [True, False], ids=["triggers", "no-triggers"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_floor_does_a_claims_work(backend: str, triggers: bool) -> None:
    floor = _claim_floor()
    db = floor.FloorDatabase(backend, providers=20, triggers=triggers)
    try:
        rate = (floor.run_pgbench(db, 20, clients=2, seconds=1) if backend == "postgresql"
                else floor.run_mariadb(db, 20, clients=2, per_client=25))
        assert rate > 0
        with db.engine.connect() as conn:
            def count(sql: str) -> int:
                return int(conn.exec_driver_sql(sql).scalar_one())

            claims = count("SELECT COUNT(*) FROM consumers")
            assert claims > 0
            if backend == "mysql":
                assert claims == 2 * 25
            assert count("SELECT COUNT(*) FROM allocations") == 3 * claims
            assert count("SELECT SUM(generation) FROM resource_providers") == claims
            assert count("SELECT COUNT(DISTINCT consumer_id) FROM allocations") == claims
            history = count("SELECT COUNT(*) FROM allotment_allocation_history")
            assert history == (3 * claims if triggers else 0)
    finally:
        db.close()
