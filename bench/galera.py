"""The scheduler loop through three allotment servers on a 3-node MariaDB Galera cluster.

allotment alone (upstream is not run here): a private cluster on loopback (the one
``tests/live/test_galera.py`` uses: Debian's ``galera-4`` and ``mariadb-server``,
which ``.ci/run`` installs), one ``allotment serve`` per node, perfload's compute
nodes loaded through the first, then ``bench/run.py``'s scheduler loop with the
schedulers spread over the three servers (scheduler i talks to server i mod 3).
Reported: boots/s, boot latency, 409s per boot, and the write transactions each
server ran again (``placement_write_retries``: on Galera mostly certification
failures, which the driver reports as deadlocks) per boot; then no provider may be
over capacity::

    .venv/bin/python bench/galera.py --providers 1000 --schedulers 10 --boots 300

(the venv's Python: the cluster helpers need PyMySQL).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(REPO))

import scenarios  # noqa: E402
import scheduler  # noqa: E402
from http_client import PlacementClient  # noqa: E402
from loader import Loader, count_providers  # noqa: E402
from run import DEFAULTS, _restarter  # noqa: E402

from tests.clients import live  # noqa: E402
from tests.support.galera import GaleraCluster, write_retries  # noqa: E402


class Spread:
    """One client to the loop's eyes; each thread talks to one of several servers."""

    def __init__(self, clients: list[PlacementClient]) -> None:
        self.clients = clients
        self._local = threading.local()
        self._assigned = 0
        self._lock = threading.Lock()

    def _mine(self) -> PlacementClient:
        client: PlacementClient | None = getattr(self._local, "client", None)
        if client is None:
            with self._lock:
                client = self.clients[self._assigned % len(self.clients)]
                self._assigned += 1
            self._local.client = client
        return client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._mine(), name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=1000)
    parser.add_argument("--schedulers", type=int, default=DEFAULTS["schedulers"])
    parser.add_argument("--boots", type=int, default=DEFAULTS["boots"],
                        help="boots per scheduler")
    parser.add_argument("--loop-limit", type=int, default=DEFAULTS["loop_limit"])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    missing = GaleraCluster.missing()
    if missing:
        raise SystemExit(f"no Galera cluster: {missing}")
    settings = scenarios.Settings(**{**DEFAULTS, "schedulers": args.schedulers,
                                     "boots": args.boots, "loop_limit": args.loop_limit,
                                     "providers": [args.providers]})
    cluster = GaleraCluster.create()
    assert cluster is not None
    servers: list[live.LiveServer] = []
    workdir = Path(tempfile.mkdtemp(prefix="allotment-bench-galera-"))
    try:
        began = time.monotonic()
        cluster.start()
        cluster.nodes[0].create_database("placement")
        for number, node in enumerate(cluster.nodes, start=1):
            servers.append(live.start(workdir / f"server{number}",
                                      database_url=node.url("placement"),
                                      workers=args.workers, threads=args.threads,
                                      extra_conf="[allotment]\nmetrics = True\n"))
        print(f"cluster and 3 servers up in {time.monotonic() - began:.0f} s", flush=True)
        loop = scheduler.Loop(args.providers)
        roots = loop.trees()
        first = PlacementClient(servers[0].url, token="admin", timeout=settings.timeout)
        loader = Loader(first, settings.load_concurrency)
        seconds = loader.load(roots, progress="galera")
        print(f"loaded {count_providers(roots)} providers in {seconds:.1f} s", flush=True)
        clients = [PlacementClient(s.url, token="admin", timeout=settings.timeout)
                   for s in servers]
        session = scenarios.Session("allotment-galera", Spread(clients), loader,  # type: ignore[arg-type]
                                    restart=_restarter(None, first, args))
        group = scenarios.Group(loop.name, [session], settings)
        before = [write_retries(s.url) for s in servers]
        loop.run(group)
        after = [write_retries(s.url) for s in servers]
        tally = next(m.loop for m in group.results if m.kind == "loop")
        boots = len(tally.boots.samples)
        causes: dict[str, float] = {}
        for b, a in zip(before, after, strict=True):
            for cause, value in a.items():
                causes[cause] = causes.get(cause, 0) + value - b.get(cause, 0)
        rate, median, p95 = tally.boots.rate, tally.boots.median, tally.boots.p95
        print(f"galera loop, {args.providers} providers, {args.schedulers} schedulers over 3 "
              f"servers: {boots} boots, {rate or 0:.1f} boots/s, boot median "
              f"{(median or 0) * 1000:.0f} ms, p95 {(p95 or 0) * 1000:.0f} ms; "
              f"{tally.conflicts / max(boots, 1):.3f} x 409 per boot, {tally.failed} failed; "
              "write retries: "
              + (", ".join(f"{cause} {count:.0f} ({count / max(boots, 1):.3f} per boot)"
                           for cause, count in sorted(causes.items())) or "none")
              + f"; over capacity: {', '.join(tally.over_capacity or []) or 'none'}",
              flush=True)
    finally:
        for server in servers:
            server.stop()
        cluster.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
