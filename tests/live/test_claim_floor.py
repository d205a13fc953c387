"""bench/claim_floor.py sends a claim's work and nothing else, from the database's own client.

A floor that skipped part of a claim, or whose triggers were not what it
says, would make every comparison with it wrong: each variant runs briefly
on both servers and the database is then read back. Every claim left one
consumer, its three allocation rows and one more generation on its
provider; with allotment's triggers the history recorded each row as
allotment's (the floor marks its transactions as allotment's writes do), and
with them off nothing did.
"""

from __future__ import annotations

from types import ModuleType

import pytest

from tests import conftest
from tests.support.bench import bench_module

BACKENDS = [backend for backend in conftest._backends() if backend != "sqlite"]


def _claim_floor() -> ModuleType:
    return bench_module("claim_floor")


@pytest.mark.parametrize("triggers", [True, False], ids=["triggers", "no-triggers"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_floor_does_a_claims_work(backend: str, triggers: bool) -> None:
    floor = _claim_floor()
    db = floor.FloorDatabase(backend, providers=20, triggers=triggers, instances=5)
    queries = {
        "consumers": "SELECT COUNT(*) FROM consumers",
        "allocations": "SELECT COUNT(*) FROM allocations",
        "generations": "SELECT SUM(generation) FROM resource_providers",
        "allocated consumers": "SELECT COUNT(DISTINCT consumer_id) FROM allocations",
        "history": "SELECT COUNT(*) FROM allotment_allocation_history",
        # Marked as allotment's writes, as behind the API.
        "history as allotment's": "SELECT COUNT(*) FROM allotment_allocation_history "
                                  "WHERE writer = 'allotment' AND request_id = 'req-floor'",
    }

    def counts() -> dict[str, int]:
        with db.engine.connect() as conn:
            return {name: int(conn.exec_driver_sql(sql).scalar_one() or 0)
                    for name, sql in queries.items()}

    try:
        loaded = counts()
        # The instances already running: 5 on each provider, 3 rows each.
        assert loaded["consumers"] == loaded["allocated consumers"] == 20 * 5
        assert loaded["allocations"] == 3 * 20 * 5
        rate = (floor.run_pgbench(db, 20, clients=2, seconds=1) if backend == "postgresql"
                else floor.run_mariadb(db, 20, clients=2, per_client=25))
        assert rate > 0
        done = counts()
        added = {name: done[name] - loaded[name] for name in queries}
        claims = added["consumers"]
        assert claims > 0
        if backend == "mysql":
            assert claims == 2 * 25
        assert added["allocations"] == 3 * claims, added
        assert added["generations"] == claims, added
        assert added["allocated consumers"] == claims, added
        assert added["history"] == (3 * claims if triggers else 0), added
        assert added["history as allotment's"] == added["history"], added
    finally:
        db.close()
