"""The database's floor for a claim: its essential statements sent by the database's own client.

What a claim must do in the database whatever serves it: lock the provider,
read its inventories with what is used of each class, insert the consumer
and its three allocation rows, move the provider's generation, commit. This
sends exactly that, from PostgreSQL's ``pgbench`` (``--clients`` connections,
``--seconds`` long) and from MariaDB's ``mariadb`` client (one process per
client, each a file of pre-written claims), on allotment's own schema at its
head (a fresh database per run, ``--providers`` providers with VCPU,
MEMORY_MB and DISK_GB, each claim on a provider drawn at random), with
allotment's triggers (the capacity guard, the change log, the history) and
with them disabled (PostgreSQL) or dropped (MariaDB)::

    .venv/bin/python bench/claim_floor.py                   # both databases
    .venv/bin/python bench/claim_floor.py --db postgresql --rounds 3

With the triggers, each claim also marks its transaction as allotment's, as
allotment's writes do (``allotment.db.writer``): on PostgreSQL the
``set_config`` statement in the BEGIN's round trip, on MariaDB the ``SET`` of
the session variables as the transaction's first statement. The history then
records the claim as allotment's, and merges what it can, as it does behind
the API; without the mark the triggers would take an outside writer's path.

Rounds alternate with and without triggers, so a busy machine weighs on
both alike. Reported: claims per second of each run and the median of each
variant, and the share of the floor the triggers take. Compare with
``bench/run.py``'s claims (the same claim over HTTP, 10 clients) to see
what serving a claim costs above its floor.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allotment.db import migrate, standard_names
from allotment.db.engine import create_engine, normalize_url

SERVERS = {"postgresql": "postgresql+psycopg://postgres@127.0.0.1:5432/postgres",
           "mysql": "mysql+pymysql://root@127.0.0.1:3306/mysql"}
# The tables allotment's triggers are on (migrations 0002-0005).
TRIGGERED = ("allocations", "consumers", "inventories", "resource_providers")
CLASSES = ("VCPU", "MEMORY_MB", "DISK_GB")
AMOUNTS = (1, 512, 1)


def provider_uuid(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _numbers(backend: str, count: int) -> str:
    """A derived table of the numbers 1..count, in its column ``n``."""
    if backend == "postgresql":
        return f"SELECT generate_series(1, {count}) AS n"
    return f"SELECT seq AS n FROM seq_1_to_{count}"  # MariaDB's Sequence engine


class FloorDatabase:
    """A fresh database at allotment's head holding ``providers`` providers,
    each running ``instances`` instances, analyzed."""

    def __init__(self, backend: str, providers: int, triggers: bool,
                 instances: int = 20) -> None:
        self.backend = backend
        self.triggers = triggers
        admin = normalize_url(SERVERS[backend])
        self.name = f"allotment_bench_floor_{uuid.uuid4().hex[:8]}"
        self.admin = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {self.name}")
        self.engine = create_engine(admin.set(database=self.name).render_as_string(
            hide_password=False))
        migrate.upgrade(self.engine)
        standard_names.sync(self.engine)
        self._load(providers, instances)
        if not triggers:
            self._without_triggers()

    def _load(self, providers: int, instances: int) -> None:
        rp, inv = sa.table("resource_providers", sa.column("id"), sa.column("uuid"),
                           sa.column("name"), sa.column("generation"),
                           sa.column("root_provider_id")), sa.table(
            "inventories", *(sa.column(c) for c in (
                "resource_provider_id", "resource_class_id", "total", "reserved", "min_unit",
                "max_unit", "step_size", "allocation_ratio")))
        with self.engine.begin() as conn:
            self.class_ids = [conn.exec_driver_sql(
                f"SELECT id FROM resource_classes WHERE name = '{name}'").scalar_one()
                for name in CLASSES]
            conn.execute(rp.insert(), [{"id": n, "uuid": provider_uuid(n), "name": f"cn-{n}",
                                        "generation": 0, "root_provider_id": n}
                                       for n in range(1, providers + 1)])
            conn.execute(inv.insert(), [
                {"resource_provider_id": n, "resource_class_id": rc, "total": 1 << 30,
                 "reserved": 0, "min_unit": 1, "max_unit": 1 << 30, "step_size": 1,
                 "allocation_ratio": 1.0}
                for n in range(1, providers + 1) for rc in self.class_ids])
            for table in ("projects", "users"):
                conn.exec_driver_sql(f"INSERT INTO {table} (id, external_id) VALUES (1, 'floor')")
            self.consumer_type = conn.exec_driver_sql(
                "SELECT id FROM consumer_types WHERE name = 'INSTANCE'").scalar()
            if self.consumer_type is None:
                conn.exec_driver_sql("INSERT INTO consumer_types (id, name) "
                                     "VALUES (1, 'INSTANCE')")
                self.consumer_type = 1
            # The instances the cloud already runs, so that the statistics
            # gathered below describe tables with rows.
            conn.exec_driver_sql(
                "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id) "
                f"SELECT CONCAT('running-', ps.n, '-', ins.n), 1, 1, 1, {self.consumer_type} "
                f"FROM ({_numbers(self.backend, providers)}) ps, "
                f"({_numbers(self.backend, instances)}) ins")
            conn.exec_driver_sql(
                "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, "
                f"used) SELECT ps.n, CONCAT('running-', ps.n, '-', ins.n), c.rc, 1 "
                f"FROM ({_numbers(self.backend, providers)}) ps, "
                f"({_numbers(self.backend, instances)}) ins, "
                f"({' UNION ALL '.join(f'SELECT {rc} AS rc' for rc in self.class_ids)}) c")
            if self.backend == "postgresql":
                # The explicit ids above leave the sequences behind.
                conn.exec_driver_sql("SELECT setval('resource_providers_id_seq', "
                                     f"{providers + 1})")
        with self.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE" if self.backend == "postgresql"
                                 else f"ANALYZE TABLE {', '.join(TRIGGERED)}")
            conn.commit()

    def _without_triggers(self) -> None:
        with self.engine.begin() as conn:
            if self.backend == "postgresql":
                for table in TRIGGERED:
                    conn.exec_driver_sql(f"ALTER TABLE {table} DISABLE TRIGGER USER")
            else:
                names = conn.exec_driver_sql(
                    "SELECT trigger_name FROM information_schema.triggers "
                    f"WHERE trigger_schema = '{self.name}'").scalars().all()
                for name in names:
                    conn.exec_driver_sql(f"DROP TRIGGER {name}")

    def inventories_with_usage(self, provider: str) -> str:
        return ("SELECT i.resource_class_id, i.total, i.reserved, i.min_unit, i.max_unit, "
                "i.step_size, i.allocation_ratio, (SELECT COALESCE(SUM(a.used), 0) "
                "FROM allocations a WHERE a.resource_provider_id = i.resource_provider_id "
                "AND a.resource_class_id = i.resource_class_id) AS used FROM inventories i "
                f"WHERE i.resource_provider_id = {provider} AND i.resource_class_id IN "
                f"({', '.join(map(str, self.class_ids))})")

    def allocation_rows(self, provider: str, consumer: str, now: str) -> str:
        return ", ".join(f"({provider}, {consumer}, {rc}, {amount}, {now})"
                         for rc, amount in zip(self.class_ids, AMOUNTS, strict=True))

    def close(self) -> None:
        self.engine.dispose()
        with self.admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {self.name}")
        self.admin.dispose()


def pgbench_script(db: FloorDatabase, providers: int) -> str:
    """One claim as pgbench sends it (simple protocol: values are pasted in)."""
    # The write context in the BEGIN's round trip (``\\;``: one compound
    # statement), as allotment sends it.
    begin = ("BEGIN \\; SELECT set_config('allotment.writer', 'allotment', true), "
             "set_config('allotment.request_id', 'req-floor', true), "
             "set_config('allotment.global_request_id', '', true);"
             if db.triggers else "BEGIN;")
    return "\n".join([
        f"\\set rp random(1, {providers})",
        begin,
        "SELECT id, generation FROM resource_providers WHERE uuid = "
        "'00000000-0000-4000-8000-' || lpad(:rp::text, 12, '0') FOR UPDATE;",
        db.inventories_with_usage(":rp") + ";",
        "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, "
        f"created_at) VALUES (gen_random_uuid()::text, 1, 1, 0, {db.consumer_type}, now()) "
        "RETURNING quote_literal(uuid) AS consumer \\gset",
        "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, "
        f"created_at) VALUES {db.allocation_rows(':rp', ':consumer', 'now()')};",
        "UPDATE resource_providers SET generation = generation + 1, updated_at = now() "
        "WHERE id = :rp;",
        "COMMIT;", ""])


def run_pgbench(db: FloorDatabase, providers: int, clients: int, seconds: float) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write(pgbench_script(db, providers))
    try:
        out = subprocess.run(
            ["pgbench", "-n", "-h", "127.0.0.1", "-U", "postgres", "-c", str(clients),
             "-j", str(min(clients, os.cpu_count() or 1)), "-T", str(round(seconds)),
             "-f", script.name, db.name],
            check=True, capture_output=True, text=True).stdout
    finally:
        os.unlink(script.name)
    failed = re.search(r"number of failed transactions: (\d+)", out)
    if failed and int(failed.group(1)):
        raise RuntimeError(f"pgbench: {failed.group(0)}")
    tps = re.search(r"tps = ([0-9.]+)", out)
    if tps is None:
        raise RuntimeError(f"pgbench printed no rate:\n{out}")
    return float(tps.group(1))


def mariadb_claims(db: FloorDatabase, providers: int, count: int, seed: int) -> str:
    """``count`` claims as one client's file (values written in)."""
    import random

    draw = random.Random(seed)
    # allotment's isolation on MySQL/MariaDB (allotment.db.engine).
    lines = ["SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED;"]
    for _ in range(count):
        n = draw.randint(1, providers)
        consumer = f"'{uuid.uuid4()}'"
        # allotment's write context: its own statement, as allotment sends it.
        context = ([f"SET @allotment_writer = 'allotment', @allotment_txn = "
                    f"{draw.getrandbits(62)}, @allotment_request_id = 'req-floor', "
                    "@allotment_global_request_id = NULL;"] if db.triggers else [])
        lines += [
            "START TRANSACTION;",
            *context,
            "SELECT id, generation FROM resource_providers "
            f"WHERE uuid = '{provider_uuid(n)}' FOR UPDATE;",
            db.inventories_with_usage(str(n)) + ";",
            "INSERT INTO consumers (uuid, project_id, user_id, generation, consumer_type_id, "
            f"created_at) VALUES ({consumer}, 1, 1, 0, {db.consumer_type}, NOW());",
            "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, "
            f"used, created_at) VALUES {db.allocation_rows(str(n), consumer, 'NOW()')};",
            f"UPDATE resource_providers SET generation = generation + 1, updated_at = NOW() "
            f"WHERE id = {n};",
            "COMMIT;"]
    return "\n".join(lines) + "\n"


def run_mariadb(db: FloorDatabase, providers: int, clients: int, per_client: int) -> float:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        raise RuntimeError("no mariadb client on PATH")
    with tempfile.TemporaryDirectory() as directory:
        files = []
        for index in range(clients):
            path = Path(directory) / f"client-{index}.sql"
            path.write_text(mariadb_claims(db, providers, per_client, seed=index))
            files.append(path)
        inputs = [path.open("rb") for path in files]
        try:
            started = time.perf_counter()
            running = [subprocess.Popen(
                [client, "-h", "127.0.0.1", "-P", "3306", "-u", "root", "--batch", "--silent",
                 db.name], stdin=claims, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                for claims in inputs]
            errors = [p.communicate()[1] for p in running]
            elapsed = time.perf_counter() - started
        finally:
            for claims in inputs:
                claims.close()
    if any(p.returncode for p in running):
        raise RuntimeError(f"mariadb: {b''.join(errors).decode()[:500]}")
    return clients * per_client / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", choices=["postgresql", "mysql", "both"], default="both")
    p.add_argument("--providers", type=int, default=1000)
    p.add_argument("--instances", type=int, default=20, help="running on each provider")
    p.add_argument("--clients", type=int, default=10)
    p.add_argument("--seconds", type=float, default=20.0, help="per pgbench run")
    p.add_argument("--claims", type=int, default=2000, help="per MariaDB client and run")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    backends = ["postgresql", "mysql"] if args.db == "both" else [args.db]
    print("| database | triggers | claims/s, each run | median | ms per claim |")
    print("|---|---|---|---|---|")
    for backend in backends:
        rates: dict[bool, list[float]] = {True: [], False: []}
        for round_ in range(args.rounds):
            for triggers in ((True, False) if round_ % 2 == 0 else (False, True)):
                db = FloorDatabase(backend, args.providers, triggers, args.instances)
                try:
                    rates[triggers].append(
                        run_pgbench(db, args.providers, args.clients, args.seconds)
                        if backend == "postgresql"
                        else run_mariadb(db, args.providers, args.clients, args.claims))
                finally:
                    db.close()
        for triggers in (True, False):
            median = statistics.median(rates[triggers])
            print(f"| {backend} | {'on' if triggers else 'off'} | "
                  f"{' / '.join(f'{r:,.0f}' for r in rates[triggers])} | {median:,.0f} | "
                  f"{1000 * args.clients / median:.2f} |")
        share = 1 - statistics.median(rates[True]) / statistics.median(rates[False])
        print(f"| {backend} | share of the floor the triggers take | | {share:.0%} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
