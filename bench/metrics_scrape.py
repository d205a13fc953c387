"""How long a Prometheus scrape of /metrics takes, and how big it is, for a cloud of N providers.

Run from the repository root with the allotment venv (it loads the data through
allotment's own database layer, with direct inserts: 10,000 providers in seconds
rather than 40,000 HTTP calls):

```
.venv/bin/python bench/metrics_scrape.py                     # SQLite, 1,000 and 10,000
.venv/bin/python bench/metrics_scrape.py --postgresql-url postgresql://postgres@127.0.0.1:5432/postgres
```

For each backend and size: a fresh database (a SQLite file, or a PostgreSQL
database created here and dropped afterwards), N compute nodes with VCPU,
MEMORY_MB and DISK_GB inventories, every second one with an allocation of each
class; then ``allotment serve --workers 2 --threads 4`` with ``[allotment]
metrics = True``, one warm-up scrape and ``--scrapes`` timed ones, plain and
gzip-encoded (as Prometheus asks). Reported: median time, uncompressed and
gzip size, and the number of capacity samples.
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import sqlalchemy as sa

from allotment.db import migrate, standard_names
from allotment.db import tables as t
from allotment.db.engine import create_engine, normalize_url

ROOT = Path(__file__).resolve().parent.parent
CLASSES = {"VCPU": (0, 32, 16.0), "MEMORY_MB": (1, 131072, 1.5), "DISK_GB": (2, 2000, 1.0)}


def load(url: str, providers: int) -> None:
    """Schema, standard names and ``providers`` compute nodes, half of them in use."""
    engine = create_engine(url)
    migrate.upgrade(engine)
    standard_names.sync(engine)
    with engine.begin() as conn:
        class_ids = dict(conn.execute(sa.select(t.resource_classes.c.name,
                                                t.resource_classes.c.id)).all())
        conn.execute(t.projects.insert(), [{"id": 1, "external_id": "bench"}])
        conn.execute(t.users.insert(), [{"id": 1, "external_id": "bench"}])
        conn.execute(t.resource_providers.insert(), [
            {"id": i, "uuid": str(uuid.uuid4()), "name": f"compute-{i:05d}", "generation": 1,
             "root_provider_id": i} for i in range(1, providers + 1)])
        conn.execute(t.inventories.insert(), [
            {"resource_provider_id": i, "resource_class_id": class_ids[rc], "total": total,
             "reserved": 0, "min_unit": 1, "max_unit": total, "step_size": 1,
             "allocation_ratio": ratio}
            for i in range(1, providers + 1) for rc, (_, total, ratio) in CLASSES.items()])
        used = list(range(1, providers + 1, 2))
        consumers = {i: str(uuid.uuid4()) for i in used}
        conn.execute(t.consumers.insert(), [
            {"uuid": consumers[i], "project_id": 1, "user_id": 1, "generation": 1}
            for i in used])
        conn.execute(t.allocations.insert(), [
            {"resource_provider_id": i, "consumer_id": consumers[i],
             "resource_class_id": class_ids[rc], "used": amount}
            for i in used for rc, amount in (("VCPU", 4), ("MEMORY_MB", 8192),
                                             ("DISK_GB", 80))])
    engine.dispose()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve(workdir: Path, url: str) -> tuple[subprocess.Popen[bytes], str]:
    conf = workdir / "placement.conf"
    conf.write_text(f"[placement_database]\nconnection = {url}\n"
                    "[api]\nauth_strategy = noauth2\n[allotment]\nmetrics = True\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    log = open(workdir / "server.log", "wb")  # noqa: SIM115 (lives as long as the server)
    process = subprocess.Popen(
        [str(ROOT / ".venv/bin/allotment"), "serve", "--config-file", str(conf),
         "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--threads", "4"],
        stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not _answers(base + "/"):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            sys.exit("allotment serve did not start:\n"
                     + (workdir / "server.log").read_text(errors="replace"))
        time.sleep(0.2)
    return process, base


def _answers(url: str) -> bool:
    """Whether ``url`` answers (a connection refused or an error status: not yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


def scrape(base: str, compressed: bool) -> tuple[float, bytes]:
    # /metrics on the API port is an admin's read (noauth2 token ``admin``).
    headers = {"X-Auth-Token": "admin", **({"Accept-Encoding": "gzip"} if compressed else {})}
    request = urllib.request.Request(base + "/metrics", headers=headers)
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as resp:
        body = resp.read()
    return time.perf_counter() - started, body


def measure(backend: str, url: str, providers: int, scrapes: int, workdir: Path) -> dict:
    started = time.perf_counter()
    load(url, providers)
    loaded = time.perf_counter() - started
    process, base = serve(workdir, url)
    try:
        _, body = scrape(base, compressed=False)  # warm-up (connections, caches)
        plain = [scrape(base, compressed=False)[0] for _ in range(scrapes)]
        gzipped = [scrape(base, compressed=True) for _ in range(scrapes)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    text = body.decode()
    samples = sum(1 for line in text.splitlines()
                  if line.startswith("placement_inventory_"))
    return {"backend": backend, "providers": providers, "load_s": loaded,
            "plain_ms": statistics.median(plain) * 1000,
            "gzip_ms": statistics.median(s for s, _ in gzipped) * 1000,
            "plain_bytes": len(body), "gzip_bytes": len(gzipped[-1][1]),
            "samples": samples, "check": len(gzip.decompress(gzipped[-1][1])) > 0}


def postgresql_database(admin_url: str, name: str, create: bool) -> str:
    admin = sa.create_engine(normalize_url(admin_url), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        if create:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin.dispose()
    return normalize_url(admin_url).set(database=name).render_as_string(hide_password=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", default="1000,10000",
                        help="comma-separated sizes (default 1000,10000)")
    parser.add_argument("--scrapes", type=int, default=7, help="timed scrapes per case")
    parser.add_argument("--postgresql-url", help="also measure on this PostgreSQL server "
                        "(a database is created there and dropped)")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    args = parser.parse_args()
    sizes = [int(n) for n in args.providers.split(",")]
    results = []
    with tempfile.TemporaryDirectory(prefix="allotment-metrics-bench-") as tmp:
        for n in sizes:
            if not args.no_sqlite:
                workdir = Path(tmp) / f"sqlite-{n}"
                workdir.mkdir()
                results.append(measure("sqlite", f"sqlite:///{workdir}/placement.sqlite",
                                       n, args.scrapes, workdir))
                print(results[-1], file=sys.stderr)
            if args.postgresql_url:
                workdir = Path(tmp) / f"postgresql-{n}"
                workdir.mkdir()
                name = f"allotment_bench_metrics_{os.getpid()}_{n}"
                url = postgresql_database(args.postgresql_url, name, create=True)
                try:
                    results.append(measure("postgresql", url, n, args.scrapes, workdir))
                    print(results[-1], file=sys.stderr)
                finally:
                    postgresql_database(args.postgresql_url, name, create=False)
    print("| backend | providers | capacity samples | scrape median (plain / gzip) "
          "| size (plain / gzip) |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['backend']} | {r['providers']:,} | {r['samples']:,} | "
              f"{r['plain_ms']:.0f} / {r['gzip_ms']:.0f} ms | "
              f"{r['plain_bytes'] / 1e6:.1f} / {r['gzip_bytes'] / 1e6:.2f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
