"""Does a write get slower as the history of what it touches grows?

One fresh database on one server (created and dropped here), at allotment's
head or at an older revision (``--revision 0005``: before the history's
lookups had indexes of their own). An aged consumer and provider are given
``--entries`` history entries each (inserted directly, as that many earlier
transactions would have left them); a fresh consumer and provider have none.
Then, in-process through the WSGI app, interleaved request by request:

- a PUT /allocations/{consumer} replacing the consumer's allocations (the
  aged one's, then the fresh one's, each on its own provider);
- a PUT /resource_providers/{uuid}/inventories changing the provider's
  totals (the aged provider's, then the fresh one's)::

    .venv/bin/python bench/history_growth.py --db postgresql
    .venv/bin/python bench/history_growth.py --db mysql --revision 0005

Medians of each are printed, in milliseconds per request.
"""

from __future__ import annotations

import argparse
import datetime
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
from allotment.db import tables as t
from allotment.db.engine import Database, create_engine, normalize_url
from allotment.wsgi import make_app

SERVERS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
           "mysql": "mysql+pymysql://root@127.0.0.1:3306/mysql"}
BATCH = 10_000


def _request(app: Any, method: str, path: str, body: Any = None) -> falcon.testing.Result:
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
               "Accept": "application/json", "Content-Type": "application/json"}
    return falcon.testing.simulate_request(app, method, path, headers=headers,
                                           body=json.dumps(body) if body is not None else None)


class Cloud:
    def __init__(self, backend: str, revision: str) -> None:
        admin = normalize_url(SERVERS[backend])
        self.name = f"allotment_bench_growth_{uuid.uuid4().hex[:8]}"
        self.admin_engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with self.admin_engine.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self.name}")
        url = admin.set(database=self.name).render_as_string(hide_password=False)
        self.engine = create_engine(url)
        migrate.upgrade(self.engine, revision)
        standard_names.sync(self.engine)
        conf = config.load([])
        conf.set_override("connection", url, group="placement_database")
        conf.set_override("auth_strategy", "noauth2", group="api")
        self.app = make_app(conf, db=Database(self.engine), prepare=False)
        self.totals: dict[str, int] = {}

    def provider(self, name: str) -> str:
        rp = str(uuid.uuid4())
        assert _request(self.app, "POST", "/resource_providers",
                        {"uuid": rp, "name": name}).status_code == 200
        self.totals[rp] = 1024
        self.inventories(rp)
        return rp

    def inventories(self, rp: str) -> float:
        """Seconds for one inventory PUT that changes the provider's totals."""
        self.totals[rp] += 1
        # A claim moves the provider's generation too.
        generation = _request(self.app, "GET", f"/resource_providers/{rp}").json["generation"]
        body = {"resource_provider_generation": generation,
                "inventories": {"VCPU": {"total": self.totals[rp]},
                                "MEMORY_MB": {"total": 1 << 30},
                                "DISK_GB": {"total": 1 << 20}}}
        started = time.perf_counter()
        resp = _request(self.app, "PUT", f"/resource_providers/{rp}/inventories", body)
        elapsed = time.perf_counter() - started
        assert resp.status_code == 200, resp.text
        return elapsed

    def claim(self, consumer: str, rp: str, generation: int | None, vcpu: int) -> float:
        """Seconds for one PUT /allocations/{consumer}."""
        body = {"allocations": {rp: {"resources": {"VCPU": vcpu, "MEMORY_MB": 2048,
                                                   "DISK_GB": 20}}},
                "project_id": "bench", "user_id": "bench",
                "consumer_generation": generation, "consumer_type": "INSTANCE"}
        started = time.perf_counter()
        status = _request(self.app, "PUT", f"/allocations/{consumer}", body).status_code
        elapsed = time.perf_counter() - started
        assert status == 204, status
        return elapsed

    def age(self, consumer: str, rp: str, entries: int) -> None:
        """``entries`` history entries for ``consumer`` on ``rp``, and for ``rp``'s inventory."""
        with self.engine.connect() as conn:
            rp_id = conn.execute(sa.select(t.resource_providers.c.id)
                                 .where(t.resource_providers.c.uuid == rp)).scalar_one()
            vcpu = conn.execute(sa.select(t.resource_classes.c.id)
                                .where(t.resource_classes.c.name == "VCPU")).scalar_one()
        common = {"created_at": datetime.datetime(2026, 1, 1), "resource_provider_id": rp_id,
                  "resource_provider_uuid": rp, "resource_class_id": vcpu,
                  "resource_class": "VCPU", "writer": "outside"}
        for start in range(1, entries + 1, BATCH):
            numbers = range(start, min(start + BATCH, entries + 1))
            # Negative transaction ids: no real transaction's.
            with self.engine.begin() as conn:
                conn.execute(t.allocation_history.insert(), [
                    {**common, "txn": -n, "consumer_uuid": consumer, "project_id": "bench",
                     "user_id": "bench", "used_before": n % 4, "used_after": (n + 1) % 4}
                    for n in numbers])
                conn.execute(t.inventory_history.insert(), [
                    {**common, "txn": -n, "resource_provider_generation": n,
                     "total_before": 1024, "total_after": 1025} for n in numbers])

    def close(self) -> None:
        self.engine.dispose()
        with self.admin_engine.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.name}")
        self.admin_engine.dispose()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=sorted(SERVERS), default="postgresql")
    p.add_argument("--revision", default="head", help="allotment's revision to run at")
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--requests", type=int, default=100, help="of each kind and side")
    args = p.parse_args(argv)
    cloud = Cloud(args.db, args.revision)
    try:
        sides = {"aged": (str(uuid.uuid4()), cloud.provider("aged")),
                 "fresh": (str(uuid.uuid4()), cloud.provider("fresh"))}
        for consumer, rp in sides.values():
            cloud.claim(consumer, rp, None, 1)
        loaded = time.perf_counter()
        cloud.age(*sides["aged"], args.entries)
        loaded = time.perf_counter() - loaded
        times: dict[tuple[str, str], list[float]] = {}
        for index in range(args.requests + 5):  # the first 5: warm-up
            order = list(sides.items()) if index % 2 == 0 else list(sides.items())[::-1]
            for side, (consumer, rp) in order:
                claim = cloud.claim(consumer, rp, index + 1, 2 + index % 2)
                inventory = cloud.inventories(rp)
                if index >= 5:
                    times.setdefault(("claim", side), []).append(claim)
                    times.setdefault(("inventories", side), []).append(inventory)
        print(f"{args.db} at revision {args.revision}: {args.entries} entries for the aged "
              f"consumer and provider (loaded in {loaded:.1f} s), {args.requests} requests "
              "of each kind and side, interleaved; medians:")
        for kind, label in (("claim", "PUT /allocations/{c}"),
                            ("inventories", "PUT .../inventories")):
            aged = statistics.median(times[(kind, "aged")]) * 1000
            fresh = statistics.median(times[(kind, "fresh")]) * 1000
            print(f"  {label}: aged {aged:.2f} ms, fresh {fresh:.2f} ms "
                  f"({aged / fresh:.2f}x)")
    finally:
        cloud.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
