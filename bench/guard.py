"""The capacity guard's cost on one large claim: a POST /allocations of many consumers.

The guard (migration 0002's triggers) runs per allocation row on PostgreSQL and
MariaDB. This times one ``POST /allocations`` of ``--consumers`` consumers (two
classes each, spread over ``--providers`` providers), in-process through the
WSGI app on a fresh database, with the guard's triggers in place and with them
dropped, so that the difference is the guard's alone::

    .venv/bin/python bench/guard.py --db postgresql --consumers 5000
    .venv/bin/python bench/guard.py --db mysql --consumers 5000

Each variant runs on its own new database (created and dropped here).
"""

from __future__ import annotations

import argparse
import json
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
from allotment.wsgi import make_app

SERVERS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
           "mysql": "mysql+pymysql://root@127.0.0.1:3306/mysql"}
DROP_GUARD = {
    "postgresql": ["DROP TRIGGER IF EXISTS allotment_guard_insert ON allocations",
                   "DROP TRIGGER IF EXISTS allotment_guard_delete ON allocations"],
    "mysql": ["DROP TRIGGER IF EXISTS allotment_guard_insert",
              "DROP TRIGGER IF EXISTS allotment_guard_delete"],
}


def _request(app: Any, method: str, path: str, body: Any = None) -> falcon.testing.Result:
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39",
               "Accept": "application/json", "Content-Type": "application/json"}
    return falcon.testing.simulate_request(app, method, path, headers=headers,
                                           body=json.dumps(body) if body is not None else None)


def run_one(backend: str, consumers: int, providers: int, guarded: bool) -> float:
    admin = normalize_url(SERVERS[backend])
    name = f"allotment_bench_guard_{uuid.uuid4().hex[:8]}"
    admin_engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
    with admin_engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    url = admin.set(database=name).render_as_string(hide_password=False)
    engine = create_engine(url)
    try:
        migrate.upgrade(engine)
        standard_names.sync(engine)
        if not guarded:
            with engine.begin() as conn:
                for statement in DROP_GUARD[backend]:
                    conn.exec_driver_sql(statement)
        conf = config.load([])
        conf.set_override("connection", url, group="placement_database")
        conf.set_override("auth_strategy", "noauth2", group="api")
        app = make_app(conf, db=Database(engine), prepare=False)
        rps = []
        for index in range(providers):
            rp = str(uuid.uuid4())
            assert _request(app, "POST", "/resource_providers",
                            {"name": f"cn{index}", "uuid": rp}).status_code == 200
            inventories = {"VCPU": {"total": 10 * consumers},
                           "MEMORY_MB": {"total": 1024 * consumers}}
            assert _request(app, "PUT", f"/resource_providers/{rp}/inventories",
                            {"resource_provider_generation": 0,
                             "inventories": inventories}).status_code == 200
            rps.append(rp)
        body = {str(uuid.uuid4()): {
            "allocations": {rps[index % providers]: {"resources": {"VCPU": 1,
                                                                   "MEMORY_MB": 512}}},
            "project_id": "bench", "user_id": "bench", "consumer_generation": None,
            "consumer_type": "INSTANCE"}
            for index in range(consumers)}
        started = time.perf_counter()
        result = _request(app, "POST", "/allocations", body)
        elapsed = time.perf_counter() - started
        assert result.status_code == 204, result.text
        return elapsed
    finally:
        engine.dispose()
        with admin_engine.connect() as conn:
            if backend == "postgresql":
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            else:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
        admin_engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=sorted(SERVERS), default="postgresql")
    parser.add_argument("--consumers", type=int, default=5000)
    parser.add_argument("--providers", type=int, nargs="+", default=[1, 1000])
    args = parser.parse_args()
    print(f"POST /allocations of {args.consumers} consumers (2 rows each), {args.db}")
    print("| providers | with guard (s) | without (s) | guard's share |")
    print("|---:|---:|---:|---:|")
    for providers in args.providers:
        with_guard = run_one(args.db, args.consumers, providers, guarded=True)
        without = run_one(args.db, args.consumers, providers, guarded=False)
        print(f"| {providers} | {with_guard:.2f} | {without:.2f} | "
              f"{(with_guard - without) / with_guard:.0%} |", flush=True)


if __name__ == "__main__":
    main()
