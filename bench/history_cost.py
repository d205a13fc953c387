"""What the history (migration 0005) costs a claim: claims with it and without it, interleaved.

Two fresh databases on one server, the same cloud in each: one at allotment's
head, one where the history's triggers are dropped and allotment's write
context (``allotment.db.writer``, one statement per write transaction) is
switched off -- all that the history adds to a claim. Boots alternate
between the two, in-process through the WSGI app (no HTTP server: its cost
would only dilute the difference), each a nova-like mix for one consumer: a
new instance's PUT, a resize's PUT replacing it, and the DELETE::

    .venv/bin/python bench/history_cost.py --db postgresql
    .venv/bin/python bench/history_cost.py --db mysql --boots 2000

Interleaving boot by boot makes a busy machine slow both variants alike; the
medians and means of each are compared.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import falcon.testing
import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allotment import config
from allotment.db import migrate, standard_names
from allotment.db.engine import Database, create_engine, normalize_url
from allotment.db.writer import NO_REQUEST, RequestIds, WriteContext
from allotment.wsgi import make_app

SERVERS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
           "mysql": "mysql+pymysql://root@127.0.0.1:3306/mysql"}
DROP_HISTORY = {
    "postgresql": [f"DROP TRIGGER IF EXISTS allotment_history_{op} ON allocations"
                   for op in ("insert", "delete", "update")]
    + ["DROP TRIGGER IF EXISTS allotment_history ON inventories",
       "DROP TRIGGER IF EXISTS allotment_history_owner ON consumers"],
    "mysql": [f"DROP TRIGGER IF EXISTS allotment_history_{table}_{event}"
              for table in ("allocations", "inventories")
              for event in ("INSERT", "UPDATE", "DELETE")]
    + ["DROP TRIGGER IF EXISTS allotment_history_consumers_UPDATE"],
}


class _NoContext(WriteContext):
    """The write context switched off: what a claim costs without the history.

    A subclass, so that it is asked exactly what the real one is asked."""

    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        self.with_begin = False  # nor sent with the BEGIN (PostgreSQL)

    def begin(self, conn: sa.Connection, ids: RequestIds = NO_REQUEST) -> None:
        pass

    def end(self, conn: sa.Connection) -> None:
        pass


def _request(app: Any, method: str, path: str, body: Any = None) -> falcon.testing.Result:
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
               "Accept": "application/json", "Content-Type": "application/json"}
    return falcon.testing.simulate_request(app, method, path, headers=headers,
                                           body=json.dumps(body) if body is not None else None)


class Variant:
    def __init__(self, backend: str, history: bool, providers: int) -> None:
        self.history = history
        admin = normalize_url(SERVERS[backend])
        self.name = f"allotment_bench_history_{uuid.uuid4().hex[:8]}"
        self.admin_engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with self.admin_engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self.name}")
        url = admin.set(database=self.name).render_as_string(hide_password=False)
        self.engine = create_engine(url)
        migrate.upgrade(self.engine)
        standard_names.sync(self.engine)
        if not history:
            with self.engine.begin() as conn:
                for statement in DROP_HISTORY[backend]:
                    conn.exec_driver_sql(statement)
        db = Database(self.engine)
        if not history:
            db.write_context = _NoContext(db.backend)
        conf = config.load([])
        conf.set_override("connection", url, group="placement_database")
        conf.set_override("auth_strategy", "noauth2", group="api")
        self.app = make_app(conf, db=db, prepare=False)
        self.providers = []
        for index in range(providers):
            rp = str(uuid.uuid4())
            assert _request(self.app, "POST", "/resource_providers",
                            {"uuid": rp, "name": f"cn-{index}"}).status_code == 200
            assert _request(self.app, "PUT", f"/resource_providers/{rp}/inventories", {
                "resource_provider_generation": 0,
                "inventories": {"VCPU": {"total": 1024}, "MEMORY_MB": {"total": 1 << 30},
                                "DISK_GB": {"total": 1 << 20}}}).status_code == 200
            self.providers.append(rp)

    def boot(self, index: int) -> float:
        """Seconds for one boot, resize and delete (three requests)."""
        consumer = str(uuid.uuid4())
        rp = self.providers[index % len(self.providers)]
        started = time.perf_counter()
        for generation, vcpu in ((None, 2), (1, 4)):
            body = {"allocations": {rp: {"resources": {"VCPU": vcpu, "MEMORY_MB": 2048,
                                                       "DISK_GB": 20}}},
                    "project_id": "bench", "user_id": "bench",
                    "consumer_generation": generation, "consumer_type": "INSTANCE"}
            status = _request(self.app, "PUT", f"/allocations/{consumer}", body).status_code
            assert status == 204, status
        assert _request(self.app, "DELETE", f"/allocations/{consumer}").status_code == 204
        return time.perf_counter() - started

    def close(self) -> None:
        self.engine.dispose()
        with self.admin_engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.name}")
        self.admin_engine.dispose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=sorted(SERVERS), default="postgresql")
    p.add_argument("--providers", type=int, default=100)
    p.add_argument("--boots", type=int, default=1000, help="boots per variant")
    args = p.parse_args(argv)
    variants = [Variant(args.db, history, args.providers) for history in (True, False)]
    try:
        for variant in variants:
            for index in range(10):  # warm-up: pools, statement caches
                variant.boot(index)
        times: dict[bool, list[float]] = {True: [], False: []}
        for index in range(args.boots):
            # Boot by boot, alternating which goes first: a busy machine slows
            # both alike.
            order = variants if index % 2 == 0 else variants[::-1]
            for variant in order:
                times[variant.history].append(variant.boot(index))
        print(f"{args.db}: {args.boots} boots each (PUT new, PUT replace, DELETE), "
              "interleaved boot by boot")
        for label, history in (("with history", True), ("without history", False)):
            runs = times[history]
            print(f"  {label}: median {statistics.median(runs) * 1000 / 3:.2f} ms, "
                  f"mean {statistics.fmean(runs) * 1000 / 3:.2f} ms per request")
        on, off = statistics.median(times[True]), statistics.median(times[False])
        mean_on, mean_off = statistics.fmean(times[True]), statistics.fmean(times[False])
        print(f"  history costs {100 * (on - off) / off:+.1f} % per claim (medians), "
              f"{100 * (mean_on - mean_off) / mean_off:+.1f} % (means)")
    finally:
        for variant in variants:
            variant.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
