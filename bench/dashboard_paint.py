"""The dashboard at scale: time to first paint and bytes transferred, 10,000 providers.

Fills a fresh database straight through SQL (2,500 trees of a compute host
and three children, 15,000 inventory records, 5,000 consumers holding 10,000
allocations, traits and aggregates), serves it with ``allotment serve
--workers 2`` and opens each dashboard page in Debian's headless chromium
(Playwright) with a token already in the tab. For each page it reports the
browser's first contentful paint, when the page's data is drawn, and the
bytes transferred (page, script, style and JSON, as the browser counts them).

    .venv/bin/python bench/dashboard_paint.py [--providers 10000] [--runs 5]
                                              [--database-url postgresql+psycopg://...] [--wide]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from allotment.db import migrate, standard_names
from allotment.db import tables as t
from allotment.db.engine import create_engine
from allotment.ledger.common import utcnow
from tests.clients import live

CHROMIUM = "/usr/bin/chromium"
TOKEN_KEY = "allotment.dashboard.token"
CHILDREN = 3  # per tree: two NUMA nodes (PCPU) and a GPU (VGPU)

# Page -> the selector that says its data is drawn.
PAGES = {
    "providers": "#trees > .node",
    "usage": "#projects tbody tr[data-project]",
}


def fill(url: str, providers: int, wide: bool = False) -> None:
    """Schema, standard names, then the cloud in a few bulk INSERTs (with ``wide``, one
    tree: a root and ``providers - 1`` children, as SR-IOV functions would be)."""
    engine = create_engine(url)
    migrate.upgrade(engine)
    standard_names.sync(engine)
    trees = providers // (1 + CHILDREN)
    with engine.begin() as conn:
        classes = dict(conn.execute(sa.select(t.resource_classes.c.name,
                                              t.resource_classes.c.id)).all())
        start = (conn.execute(sa.select(sa.func.max(t.resource_providers.c.id))).scalar() or 0) + 1
        rps, invs, allocs, rpt, rpa = [], [], [], [], []
        trait = conn.execute(sa.select(t.traits.c.id)
                             .where(t.traits.c.name == "HW_CPU_X86_AVX2")).scalar_one()
        aggs = [conn.execute(t.placement_aggregates.insert().values(uuid=str(uuid.uuid4())))
                .inserted_primary_key[0] for _ in range(8)]  # type: ignore[index]
        project = conn.execute(t.projects.insert().values(external_id="bench-project")
                               ).inserted_primary_key[0]  # type: ignore[index]
        user = conn.execute(t.users.insert().values(external_id="bench-user")
                            ).inserted_primary_key[0]  # type: ignore[index]
        consumers = []

        def inventory(rp_id: int, rc: str, total: int, ratio: float = 1.0) -> None:
            invs.append({"resource_provider_id": rp_id, "resource_class_id": classes[rc],
                         "total": total, "reserved": 0, "min_unit": 1, "max_unit": total,
                         "step_size": 1, "allocation_ratio": ratio})

        for tree in range(trees):
            root = start + tree * (1 + CHILDREN)
            rps.append({"id": root, "uuid": str(uuid.uuid4()), "name": f"compute-{tree:05d}",
                        "generation": 1, "root_provider_id": root, "parent_provider_id": None})
            for child, name in enumerate(["numa0", "numa1", "gpu0"], start=1):
                rps.append({"id": root + child, "uuid": str(uuid.uuid4()),
                            "name": f"compute-{tree:05d}-{name}", "generation": 1,
                            "root_provider_id": root, "parent_provider_id": root})
            inventory(root, "VCPU", 64, 4.0)
            inventory(root, "MEMORY_MB", 262144, 1.5)
            inventory(root, "DISK_GB", 2000)
            inventory(root + 1, "PCPU", 16)
            inventory(root + 2, "PCPU", 16)
            inventory(root + 3, "VGPU", 8)
            rpt.append({"resource_provider_id": root, "trait_id": trait})
            rpa.append({"resource_provider_id": root, "aggregate_id": aggs[tree % len(aggs)]})
            for n in range(2):
                consumer = str(uuid.uuid4())
                consumers.append({"uuid": consumer, "project_id": project, "user_id": user,
                                  "generation": 1})
                allocs.append({"resource_provider_id": root, "consumer_id": consumer,
                               "resource_class_id": classes["VCPU"], "used": 1 + (tree + n) % 64})
                allocs.append({"resource_provider_id": root, "consumer_id": consumer,
                               "resource_class_id": classes["MEMORY_MB"],
                               "used": 1024 * (1 + tree % 100)})
        if wide:
            rps = rps[:1]
            invs = [inv for inv in invs if inv["resource_provider_id"] == start]
            rpt, rpa = rpt[:1], rpa[:1]
            allocs = [a for a in allocs if a["resource_provider_id"] == start]
            consumers = consumers[:2]
            for n in range(1, providers):
                rps.append({"id": start + n, "uuid": str(uuid.uuid4()),
                            "name": f"compute-00000-vf{n:05d}", "generation": 1,
                            "root_provider_id": start, "parent_provider_id": start})
                inventory(start + n, "SRIOV_NET_VF", 1)
            trees = 1
        now = utcnow()
        conn.execute(t.resource_providers.insert(), [{**row, "created_at": now} for row in rps])
        conn.execute(t.inventories.insert(), invs)
        conn.execute(t.consumers.insert(), consumers)
        conn.execute(t.allocations.insert(), allocs)
        conn.execute(t.resource_provider_traits.insert(), rpt)
        conn.execute(t.resource_provider_aggregates.insert(), rpa)
    engine.dispose()
    print(f"filled: {len(rps)} providers in {trees} trees, {len(invs)} inventories, "
          f"{len(consumers)} consumers, {len(allocs)} allocations")


MEASURE = """() => {
  const paint = performance.getEntriesByName('first-contentful-paint')[0];
  const nav = performance.getEntriesByType('navigation')[0];
  const resources = performance.getEntriesByType('resource');
  return {
    fcp: paint ? paint.startTime : null,
    bytes: nav.transferSize + resources.reduce((sum, r) => sum + r.transferSize, 0),
    decoded: nav.decodedBodySize + resources.reduce((sum, r) => sum + r.decodedBodySize, 0),
    requests: 1 + resources.length,
  };
}"""


def measure(url: str, runs: int) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        for page_name, drawn in PAGES.items():
            results = []
            for _ in range(runs + 1):  # the first run warms the server's caches
                context = browser.new_context(viewport={"width": 1280, "height": 860})
                context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, 'admin')")
                page = context.new_page()
                began = time.perf_counter()
                page.goto(f"{url}/dashboard#{page_name}")
                page.wait_for_selector(drawn)
                drawn_ms = (time.perf_counter() - began) * 1000
                page.wait_for_timeout(300)  # let paint and resource entries settle
                results.append({**page.evaluate(MEASURE), "drawn": drawn_ms})
                context.close()
            results = results[1:]
            fcp = statistics.median(r["fcp"] for r in results)
            drawn_median = statistics.median(r["drawn"] for r in results)
            last = results[-1]
            print(f"{page_name:10s} first contentful paint {fcp:6.0f} ms (median of {runs}); "
                  f"data drawn {drawn_median:6.0f} ms after navigation started; "
                  f"{last['requests']} requests, {last['bytes'] / 1024:.1f} KiB transferred "
                  f"({last['decoded'] / 1024:.1f} KiB decoded)")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--database-url")
    parser.add_argument("--wide", action="store_true",
                        help="one tree of a root and its children instead of many hosts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{tmp}/placement.sqlite"
        began = time.perf_counter()
        fill(url, args.providers, args.wide)
        print(f"fill took {time.perf_counter() - began:.1f} s")
        server = live.start(Path(tmp) / "server", database_url=url,
                            extra_conf="[allotment]\ndashboard = True\n")
        try:
            measure(server.url, args.runs)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
