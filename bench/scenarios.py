"""The workloads: what data each loads and which requests it times.

1. perfload (upstream CI's): compute nodes with VCPU, MEMORY_MB and DISK_GB, half of
   them in one aggregate, two thirds with HW_CPU_X86_AVX2; the candidates query of
   upstream's perfload job, before and after allocations were written from returned
   candidates; at the first size also claim throughput (workload 5).
2. the same at a larger size (``--providers`` takes a list of sizes).
3. nested: compute nodes with two NUMA children carrying VCPU and MEMORY_MB, each
   with an FPGA and a VGPU device below; granular groups, same_subtree, isolate.
4. wide: roots with 8 and 16 identical one-VGPU device children and single-device
   hosts; six ``resourcesN=VGPU:1`` groups, group_policy=none, with and without limit;
   then one group more than a wide root has devices (no candidates).

allotment's own endpoints, on allotment servers only: explain (GET
/explain/allocation_candidates) and headroom (GET /headroom, on the perfload
and nested clouds).

The scheduler loop (loop, loopnested) and upstream's bug 2126751 are in scheduler.py.

Each workload's providers carry names (and uuids derived from them) of their own, so
they can share one long-lived server in ``--url`` mode.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import measure
from http_client import PlacementClient, Reply, RequestTimeout
from loader import Loader, Provider, stable_uuid

PERFLOAD_QUERY = ("resources=VCPU:1,DISK_GB:10,MEMORY_MB:256"
                  "&member_of={aggregate}&required=HW_CPU_X86_AVX2")


@dataclass
class Settings:
    """Sizes and limits of one benchmark run."""

    providers: list[int]
    nested_hosts: int
    wide_roots: int
    wide_widths: list[int]
    wide_groups: int
    wide_max_candidates: int
    samples: int
    requests: int
    concurrency: int
    allocations: int
    claims: int
    timeout: float
    latency_budget: float
    throughput_budget: float
    load_concurrency: int
    schedulers: int
    boots: int
    loop_seconds: float | None
    loop_limit: int


@dataclass
class Measurement:
    """One row's worth of numbers for one implementation."""

    impl: str
    scenario: str
    label: str
    kind: str  # "load", "latency", "throughput", "writes", "loop"
    timing: measure.Timing | None = None
    seconds: float | None = None  # for "load"
    requests: int | None = None  # for "load"
    candidates: int | None = None
    note: str = ""
    loop: Any = None  # for "loop": a scheduler.LoopTally
    rss: list[int] | None = None  # for "memory": bytes per worker


@dataclass
class Session:
    """One implementation's server, loaded with one scenario's data."""

    impl: str
    client: PlacementClient
    loader: Loader
    restart: Callable[[], None] | None  # None when we do not own the server
    # Resident memory of each worker, when we own the server.
    worker_rss: Callable[[], list[int]] | None = None
    consumers: list[str] = field(default_factory=list)


class Group:
    """The servers under test for one scenario, measured side by side.

    Latency samples alternate between the servers request by request, and throughput
    runs go in halves ordered A, B, B, A: a machine whose background load drifts
    during the run then skews both servers alike, which keeps the ratios honest.
    """

    def __init__(self, scenario: str, sessions: list[Session], settings: Settings) -> None:
        self.scenario = scenario
        self.sessions = sessions
        self.settings = settings
        self.results: list[Measurement] = []

    def record(self, impl: str, label: str, kind: str, **values) -> Measurement:
        result = Measurement(impl, self.scenario, label, kind, **values)
        self.results.append(result)
        return result

    def _timed_out(self, session: Session, label: str) -> None:
        # The server may still be busy with the abandoned request: start it afresh
        # so that it does not slow down what is measured next.
        print(f"    {session.impl}: {label}: timed out after {self.settings.timeout:g} s",
              flush=True)
        if session.restart is not None:
            session.restart()

    def candidates(self, session: Session, path: str, listed: str = "allocation_requests"
                   ) -> tuple[list[dict] | None, Reply | None]:
        """One GET of ``path``: its allocation requests (or the list under ``listed``;
        None unless 200) and the reply (None on timeout)."""
        try:
            reply = session.client.get(path, timeout=self.settings.timeout)
        except RequestTimeout:
            return None, None
        if reply.status != 200:
            print(f"    {session.impl}: GET {path[:70]}...: {reply.describe()}", flush=True)
            return None, reply
        return reply.json()[listed], reply

    def measure_query(self, label: str, query: str, throughput: bool,
                      endpoint: str = "/allocation_candidates",
                      listed: str = "allocation_requests") -> dict[str, list[dict] | None]:
        """Probe, then time ``GET endpoint?query`` alone and under load (``listed``:
        the key of the answer's list, counted in the report)."""
        s = self.settings
        path = f"{endpoint}?{query}"
        found: dict[str, list[dict] | None] = {}
        latency: dict[str, measure.Timing] = {}
        active: list[Session] = []
        for session in self.sessions:
            found[session.impl], first = self.candidates(session, path, listed)
            timing = latency[session.impl] = measure.Timing()
            if first is None:
                timing.timed_out = s.timeout
                self._timed_out(session, label)
                continue
            if first.elapsed > 1.0:
                # A slow first request is no warm-up artefact: keep it as a sample.
                timing.add(first)
            active.append(session)
        started = {session.impl: time.perf_counter() for session in active}
        for _ in range(s.samples):
            for session in list(active):
                timing = latency[session.impl]
                try:
                    timing.add(session.client.get(path, timeout=s.timeout))
                except RequestTimeout:
                    timing.timed_out = s.timeout
                    active.remove(session)
                    self._timed_out(session, label)
                    continue
                if (len(timing.samples) >= s.samples
                        or time.perf_counter() - started[session.impl] > s.latency_budget):
                    active.remove(session)
            if not active:
                break
        for session in self.sessions:
            items = found[session.impl]
            count = None if items is None else len(items)
            timing = latency[session.impl]
            self.record(session.impl, label, "latency", timing=timing, candidates=count)
            if timing.samples:
                print(f"    {session.impl}: {label}: {count} candidates, median "
                      f"{_ms(timing.median)} (n={len(timing.samples)})", flush=True)
        if throughput:
            runnable = [x for x in self.sessions if latency[x.impl].timed_out is None]
            self._throughput(label, path, runnable)
            for session in self.sessions:
                if session not in runnable:
                    self.record(session.impl, label, "throughput",
                                timing=measure.Timing(timed_out=s.timeout,
                                                      concurrency=s.concurrency))
        return found

    def _throughput(self, label: str, path: str, sessions: list[Session]) -> None:
        s = self.settings
        half = max(1, s.requests // 2)
        totals = {x.impl: measure.Timing(concurrency=s.concurrency) for x in sessions}
        for session in sessions + sessions[::-1]:
            total = totals[session.impl]
            if total.timed_out is not None:
                continue
            calls = [lambda c, t: c.get(path, timeout=t)] * half
            total.merge(measure.concurrently(session.client, calls, s.concurrency,
                                             s.timeout, s.throughput_budget / 2))
            if total.timed_out is not None:
                self._timed_out(session, label)
        for session in sessions:
            timing = totals[session.impl]
            self.record(session.impl, label, "throughput", timing=timing)
            print(f"    {session.impl}: {label}: {_rate(timing.rate)} with "
                  f"{s.concurrency} clients", flush=True)

    def claim(self, session: Session, label: str, requests: list[dict], prefix: str,
              concurrency: int, ensure: bool = False) -> None:
        """PUT /allocations for one new consumer per allocation request, concurrently.

        With ``ensure``, writes that failed with a server error (upstream on SQLite
        answers "database is locked") are retried one by one afterwards, outside the
        timing, so that what is measured next sees the same data on every server.
        """
        consumers = [stable_uuid(f"{self.scenario}-{prefix}-{i}")
                     for i in range(len(requests))]
        session.consumers.extend(consumers)
        failed: dict[str, dict] = {}

        def make_call(consumer: str, allocations: dict):
            def call(_client, _timeout):
                reply = session.loader.allocate(consumer, allocations)
                if reply.status >= 500:
                    failed[consumer] = allocations
                return reply
            return call

        calls = [make_call(c, r["allocations"])
                 for c, r in zip(consumers, requests, strict=True)]
        timing = measure.concurrently(session.client, calls, concurrency,
                                      self.settings.timeout)
        self.record(session.impl, label, "writes", timing=timing)
        print(f"    {session.impl}: {label}: {_rate(timing.rate)}, "
              f"statuses {dict(timing.statuses)}", flush=True)
        if ensure:
            for consumer, allocations in failed.items():
                session.loader.allocate_retrying(consumer, allocations)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f} ms"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}/s"


class Scenario:
    """A named data set plus the requests timed against it."""

    name = ""
    title = ""
    # Timed on allotment servers only (an endpoint upstream does not have).
    ours_only = False

    def trees(self) -> list[Provider]:
        raise NotImplementedError

    def run(self, group: Group) -> None:
        raise NotImplementedError


class Perfload(Scenario):
    def __init__(self, providers: int, with_claims: bool) -> None:
        self.providers = providers
        self.with_claims = with_claims
        self.name = f"perfload-{providers}"
        self.title = f"perfload, {providers} compute nodes"
        self.aggregate = stable_uuid(f"{self.name}-aggregate")

    def trees(self) -> list[Provider]:
        return [
            Provider(
                name=f"{self.name}-cn-{i:05d}",
                inventories={
                    "VCPU": {"total": 32, "allocation_ratio": 4.0},
                    "MEMORY_MB": {"total": 131072, "reserved": 512, "allocation_ratio": 1.5},
                    "DISK_GB": {"total": 2000, "allocation_ratio": 1.0},
                },
                traits=["HW_CPU_X86_AVX2"] if i % 3 else [],
                aggregates=[self.aggregate] if i % 2 == 0 else [],
            )
            for i in range(self.providers)
        ]

    def run(self, group: Group) -> None:
        s = group.settings
        query = PERFLOAD_QUERY.format(aggregate=self.aggregate)
        found = group.measure_query("candidates", query, throughput=True)
        label = f"write {s.allocations} allocations from the candidates"
        for session in group.sessions:
            if found[session.impl]:
                group.claim(session, label, found[session.impl][:s.allocations], "alloc",
                            s.load_concurrency, ensure=True)
        group.measure_query(f"candidates after {s.allocations} allocations", query,
                            throughput=True)
        if not (self.with_claims and s.claims):
            return
        hot = max(1, s.claims // 5)
        for session in group.sessions:
            fresh, _ = group.candidates(session, "/allocation_candidates?" + query)
            if not fresh:
                continue
            spread = [fresh[i % len(fresh)] for i in range(s.claims)]
            group.claim(session, f"claims: {s.claims} consumers, round-robin over the "
                        "candidates", spread, "claim", s.concurrency)
            group.claim(session, f"claims: {hot} consumers on one provider (contended)",
                        [fresh[0]] * hot, "hot", s.concurrency)


class Explain(Scenario):
    """GET /explain/allocation_candidates on the perfload cloud: allotment's own
    endpoint (upstream has none, so a server that does not serve it is not
    loaded: compare allotment with a baseline of itself)."""

    ours_only = True

    def __init__(self, providers: int) -> None:
        self.cloud = Perfload(providers, with_claims=False)
        self.name = f"explain-{providers}"
        self.title = f"explain, {providers} compute nodes"

    def trees(self) -> list[Provider]:
        return self.cloud.trees()

    def run(self, group: Group) -> None:
        queries = [
            ("perfload query (a trait and an aggregate leave out 2/3 of the hosts)",
             PERFLOAD_QUERY.format(aggregate=self.cloud.aggregate)),
            ("nova's query, limit=1000", "resources=VCPU:1,MEMORY_MB:256,DISK_GB:10&limit=1000"),
            ("nothing fits (every tree judged)", "resources=VCPU:1000"),
        ]
        for label, query in queries:
            group.measure_query(label, query, throughput=False,
                                endpoint="/explain/allocation_candidates")


class Headroom(Scenario):
    """GET /headroom on the perfload cloud (allotment's own endpoint, as explain):
    every host counted by the capacity rule's closed form (the single path)."""

    ours_only = True
    TEMPLATE = "100xVCPU:64*4,MEMORY_MB:262144,DISK_GB:4000"
    LARGE = "resources=VCPU:4,MEMORY_MB:8192,DISK_GB:80"

    def __init__(self, providers: int) -> None:
        self.cloud = Perfload(providers, with_claims=False)
        self.name = f"headroom-{providers}"
        self.title = f"headroom, {providers} compute nodes"

    def trees(self) -> list[Provider]:
        return self.cloud.trees()

    def run(self, group: Group) -> None:
        drained = ",".join(root.uuid for root in self.trees()[:100])
        queries = [
            ("m1.large: every host counted and listed", self.LARGE),
            ("m1.large, limit=10 (the total of all, 10 roots listed)",
             f"{self.LARGE}&limit=10"),
            ("perfload query (a trait and an aggregate leave out 2/3 of the hosts)",
             PERFLOAD_QUERY.format(aggregate=self.cloud.aggregate)),
            (f"m1.large, what-if: 100 hosts drained, add={self.TEMPLATE}",
             f"{self.LARGE}&exclude_roots={drained}&add={self.TEMPLATE}"),
        ]
        _measure_headroom(group, queries)


class NestedHeadroom(Scenario):
    """GET /headroom on nested's cloud: the spread path (the engine's first
    candidate claimed on an overlay, tree after tree)."""

    ours_only = True

    def __init__(self, hosts: int) -> None:
        self.cloud = Nested(hosts)
        self.name = f"headroom-nested-{hosts}"
        self.title = f"headroom, nested, {hosts} compute nodes x (2 NUMA + 4 devices)"

    def trees(self) -> list[Provider]:
        return self.cloud.trees()

    def run(self, group: Group) -> None:
        queries = [*Nested.QUERIES,
                   ("unsuffixed over each tree", "resources=VCPU:2,MEMORY_MB:2048,DISK_GB:10")]
        _measure_headroom(group, queries)


def _measure_headroom(group: Group, queries: list[tuple[str, str]]) -> None:
    for label, query in queries:
        for session in group.sessions:
            found, reply = group.candidates(session, f"/headroom?{query}", listed="total")
            if reply is not None and reply.status == 200:
                print(f"    {session.impl}: {label}: total {found}", flush=True)
        group.measure_query(label, query, throughput=False, endpoint="/headroom",
                            listed="roots")


class Nested(Scenario):
    FPGA_UNITS = 2  # per NUMA node; the scheduler loop's variant has more
    QUERIES = (
        ("two NUMA nodes, isolate",
         "resources=DISK_GB:10&resources_N0=VCPU:2,MEMORY_MB:2048"
         "&resources_N1=VCPU:2,MEMORY_MB:2048&group_policy=isolate"),
        ("CPU + FPGA in one NUMA subtree",
         "resources_CPU=VCPU:2,MEMORY_MB:2048&resources_ACC=FPGA:1"
         "&same_subtree=_CPU,_ACC&group_policy=isolate"),
        ("2 x (CPU + VGPU) subtrees, isolate",
         "resources_C0=VCPU:2,MEMORY_MB:1024&resources_G0=VGPU:1&same_subtree=_C0,_G0"
         "&resources_C1=VCPU:2,MEMORY_MB:1024&resources_G1=VGPU:1&same_subtree=_C1,_G1"
         "&group_policy=isolate"),
    )

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts
        self.name = f"nested-{hosts}"
        self.title = f"nested, {hosts} compute nodes x (2 NUMA + 4 devices)"

    def trees(self) -> list[Provider]:
        roots = []
        for i in range(self.hosts):
            host = f"{self.name}-cn-{i:04d}"
            numas = []
            for n in range(2):
                numa = f"{host}-numa{n}"
                numas.append(Provider(
                    name=numa,
                    inventories={"VCPU": {"total": 16, "allocation_ratio": 4.0},
                                 "MEMORY_MB": {"total": 65536, "allocation_ratio": 1.0}},
                    traits=["HW_NUMA_ROOT"],
                    children=[
                        Provider(name=f"{numa}-fpga",
                                 inventories={"FPGA": {"total": self.FPGA_UNITS}}),
                        Provider(name=f"{numa}-gpu", inventories={"VGPU": {"total": 4}}),
                    ],
                ))
            roots.append(Provider(name=host, inventories={"DISK_GB": {"total": 2000}},
                                  children=numas))
        return roots

    def run(self, group: Group) -> None:
        for label, query in self.QUERIES:
            group.measure_query(label, query, throughput=True)


class Wide(Scenario):
    def __init__(self, roots: int, widths: list[int], groups: int,
                 max_candidates: int) -> None:
        self.roots = roots
        self.widths = widths
        self.groups = groups
        self.max_candidates = max_candidates
        self.name = "wide"
        self.title = (f"wide trees, {roots} root(s) per shape, "
                      f"{groups} groups VGPU:1, group_policy=none")

    @staticmethod
    def trait(width: int) -> str:
        return f"CUSTOM_BENCH_WIDE_{width}"

    def trees(self) -> list[Provider]:
        roots = []
        for width in [1, *self.widths]:
            for r in range(self.roots):
                host = f"{self.name}-w{width}-host-{r:02d}"
                # A single-device host has one device big enough for every group;
                # wide hosts have identical devices of one VGPU each.
                total = max(8, self.groups) if width == 1 else 1
                children = [Provider(name=f"{host}-gpu-{d:02d}",
                                     inventories={"VGPU": {"total": total}},
                                     traits=[self.trait(width)])
                            for d in range(width)]
                roots.append(Provider(name=host, children=children))
        return roots

    def query(self, width: int, limit: int | None, groups: int | None = None) -> str:
        parts = [f"resources{g}=VGPU:1&required{g}={self.trait(width)}"
                 for g in range(1, (groups or self.groups) + 1)]
        parts.append("group_policy=none")
        if limit is not None:
            parts.append(f"limit={limit}")
        return "&".join(parts)

    def expected(self, width: int) -> int:
        """Candidates without a limit: ordered picks of distinct devices, per root."""
        if width == 1:
            return self.roots
        if width < self.groups:
            return 0
        return self.roots * math.perm(width, self.groups)

    @staticmethod
    def label(width: int, limit: int | None) -> str:
        shape = "single-device hosts" if width == 1 else f"{width} devices per root"
        return f"{shape}, " + (f"limit={limit}" if limit else "no limit")

    def run(self, group: Group) -> None:
        for width in [1, *self.widths]:
            for limit in (10, None):
                label = self.label(width, limit)
                if limit is None and self.expected(width) > self.max_candidates:
                    for session in group.sessions:
                        group.record(session.impl, label, "latency",
                                     note=f"skipped: {self.expected(width):,} candidates")
                    continue
                group.measure_query(label, self.query(width, limit), throughput=False)
        # More groups than devices: nothing fits, which must show without trying
        # every ordered pick of devices.
        for width in self.widths:
            label = f"{width} devices per root, {width + 1} groups (none fit)"
            group.measure_query(label, self.query(width, None, groups=width + 1),
                                throughput=False)


def build(settings: Settings, only: set[str]) -> list[Scenario]:
    scenarios: list[Scenario] = []
    if "perfload" in only:
        for i, size in enumerate(settings.providers):
            scenarios.append(Perfload(size, with_claims=i == 0 and "claims" in only))
    if "explain" in only:
        scenarios += [Explain(size) for size in settings.providers]
    if "headroom" in only:
        scenarios += [Headroom(size) for size in settings.providers]
        scenarios.append(NestedHeadroom(settings.nested_hosts))
    if "nested" in only:
        scenarios.append(Nested(settings.nested_hosts))
    if "wide" in only:
        scenarios.append(Wide(settings.wide_roots, settings.wide_widths,
                              settings.wide_groups, settings.wide_max_candidates))
    return scenarios


def warm_up(client: PlacementClient, workers: int, threads: int) -> None:
    """Touch every worker once so process start-up is not timed."""
    paths = ["/", "/resource_providers?name=bench-warm-up", "/traits?name=startswith:CUSTOM_",
             "/resource_classes"]
    with ThreadPoolExecutor(max(1, workers * threads)) as pool:
        list(pool.map(lambda p: client.get(p), paths * (2 * workers * threads)))
