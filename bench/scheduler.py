"""The scheduler loop: servers booted the way nova's scheduler does it, side by side.

6. loop: S concurrent schedulers on perfload's compute nodes. One boot is
   ``GET /allocation_candidates`` (perfload's query plus ``limit``, nova's
   ``[scheduler] max_placement_results``), then ``PUT /allocations/{new consumer}`` of
   a candidate picked at random among those returned (nova's weighers spread the
   instances). A 409 (another scheduler took the room first) moves on to another
   candidate of the same answer, up to 3; then the query is asked again; after 3
   queries without a claim the boot has failed. An empty answer fails it at once, as
   nova's NoValidHost does.
7. loopnested: the same loop on nested's hosts (NUMA children, devices below), with
   granular groups, same_subtree and group_policy=isolate.
8. bug2126751 (upstream's bug): one root with 8 one-unit PCI devices, asked for with
   8 granular groups of one device each: with the loop's limit, then unlimited
   (8! = 40,320 candidates).

After a loop, every provider that any PUT named is read back (inventories and
usages): in a fresh database only those can hold allocations, so that is every
provider that could be over capacity. The usages summed must also equal what the
successful PUTs wrote.
"""

from __future__ import annotations

import http.client
import math
import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import measure
from http_client import Reply, RequestTimeout
from loader import Provider, stable_uuid
from scenarios import PERFLOAD_QUERY, Group, Nested, Perfload, Scenario, Session, Settings

QUERIES_PER_BOOT = 3  # answers asked for before a boot counts as failed
CLAIMS_PER_ANSWER = 3  # candidates of one answer tried before asking again


@dataclass
class LoopTally:
    """What one implementation's scheduler loop did, over all its runs."""

    schedulers: int
    # samples: whole-boot times of the boots that claimed; wall: time spent booting;
    # so its rate is successful boots per second.
    boots: measure.Timing = field(default_factory=measure.Timing)
    attempted: int = 0
    failed: int = 0
    no_candidates: int = 0  # failed boots whose answer was empty
    queries: int = 0
    puts: int = 0
    conflicts: int = 0  # PUTs answered 409
    errors: Counter = field(default_factory=Counter)  # "PUT 500": n; status 0: no answer
    touched: set[str] = field(default_factory=set)  # providers named in any PUT
    written: Counter = field(default_factory=Counter)  # resource class: amount claimed
    candidates: int | None = None  # size of the first answer
    over_capacity: list[str] | None = None  # None until checked
    check_note: str = ""

    def merge(self, other: LoopTally) -> None:
        self.boots.merge(other.boots)
        self.attempted += other.attempted
        self.failed += other.failed
        self.no_candidates += other.no_candidates
        self.queries += other.queries
        self.puts += other.puts
        self.conflicts += other.conflicts
        self.errors.update(other.errors)
        self.touched |= other.touched
        self.written.update(other.written)
        if self.candidates is None:
            self.candidates = other.candidates

    def as_dict(self) -> dict:
        return {"schedulers": self.schedulers, "boots": self.boots.as_dict(),
                "attempted": self.attempted, "failed": self.failed,
                "no_candidates": self.no_candidates, "queries": self.queries,
                "puts": self.puts, "conflicts": self.conflicts,
                "errors": dict(self.errors), "providers_checked": len(self.touched),
                "written": dict(self.written), "over_capacity": self.over_capacity,
                "check_note": self.check_note}


def _answer(call) -> Reply | None:
    """One request of a boot; None when the connection dropped (counted by the caller).

    A timeout is not caught: it ends the whole loop, as in the other workloads.
    """
    try:
        return call()
    except (OSError, http.client.HTTPException):
        return None


def boot(session: Session, path: str, consumer: str, rng: random.Random,
         tally: LoopTally) -> None:
    """Schedule one server: query, claim a random candidate, retry as nova would."""
    started = time.perf_counter()
    tally.attempted += 1
    for _ in range(QUERIES_PER_BOOT):
        tally.queries += 1
        reply = _answer(lambda: session.client.get(path))
        if reply is None or reply.status != 200:
            tally.errors[f"GET {0 if reply is None else reply.status}"] += 1
            continue
        answer = reply.json()["allocation_requests"]
        if tally.candidates is None:
            tally.candidates = len(answer)
        if not answer:
            tally.no_candidates += 1
            break
        for choice in rng.sample(answer, min(CLAIMS_PER_ANSWER, len(answer))):
            allocations = choice["allocations"]
            tally.touched.update(allocations)
            tally.puts += 1
            put = _answer(lambda a=allocations: session.loader.allocate(consumer, a))
            if put is not None and put.status == 204:
                tally.boots.samples.append(time.perf_counter() - started)
                for held in allocations.values():
                    tally.written.update(held["resources"])
                return
            if put is not None and put.status == 409:
                tally.conflicts += 1
            else:
                tally.errors[f"PUT {0 if put is None else put.status}"] += 1
    tally.failed += 1


def _run_half(group: Group, session: Session, path: str, half: int) -> LoopTally:
    """S schedulers booting on one server, for half the boots (or half the time)."""
    s = group.settings
    if s.loop_seconds:
        boots, budget = None, s.loop_seconds / 2
    else:
        boots, budget = max(1, s.boots // 2), s.throughput_budget / 2
    stop = threading.Event()
    started = time.perf_counter()

    def scheduler(index: int) -> LoopTally:
        # The same seeds on every server: the same picks wherever the answers agree.
        rng = random.Random(f"{group.scenario}-{half}-{index}")
        tally = LoopTally(s.schedulers)
        done = 0
        try:
            while (not stop.is_set() and (boots is None or done < boots)
                   and time.perf_counter() - started < budget):
                consumer = stable_uuid(f"{group.scenario}-boot-{half}-{index}-{done}")
                session.consumers.append(consumer)
                try:
                    boot(session, path, consumer, rng, tally)
                except RequestTimeout:
                    stop.set()
                    tally.boots.timed_out = s.timeout
                    break
                done += 1
        finally:
            # Its own connection only: the other schedulers may still be sending.
            session.client.close_own()
        return tally

    total = LoopTally(s.schedulers)
    with ThreadPoolExecutor(s.schedulers) as pool:
        for tally in pool.map(scheduler, range(s.schedulers)):
            total.merge(tally)
    total.boots.wall = time.perf_counter() - started
    total.boots.concurrency = s.schedulers
    return total


def check_capacity(session: Session, tally: LoopTally, names: dict[str, str]) -> None:
    """Read back every provider a PUT named: none may use more than its capacity, and
    the usages summed must be what the successful PUTs wrote."""

    def read(uuid: str) -> tuple[list[str], Counter]:
        base = f"/resource_providers/{uuid}"
        inventories = session.client.get(base + "/inventories")
        usages = session.client.get(base + "/usages")
        if inventories.status != 200 or usages.status != 200:
            raise RuntimeError(f"reading {names.get(uuid, uuid)}: "
                               f"{inventories.status}/{usages.status}")
        used = Counter(usages.json()["usages"])
        over = []
        for rc, inv in inventories.json()["inventories"].items():
            capacity = int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])
            if used[rc] > capacity:
                over.append(f"{names.get(uuid, uuid)} {rc} {used[rc]}/{capacity}")
        return over, used

    over: list[str] = []
    used_total: Counter = Counter()
    try:
        with ThreadPoolExecutor(session.loader.concurrency) as pool:
            for found, used in pool.map(read, sorted(tally.touched)):
                over += found
                used_total.update(used)
    except (RuntimeError, RequestTimeout, OSError, http.client.HTTPException) as exc:
        tally.check_note = f"check failed: {exc}"
        return
    tally.over_capacity = over
    used_total = +used_total  # drop zero counts, as ``written`` has none
    if used_total != tally.written:
        rcs = sorted(set(used_total) | set(tally.written))
        tally.check_note = "usages differ from the claims: " + ", ".join(
            f"{rc} {used_total[rc]} used vs {tally.written[rc]} claimed" for rc in rcs
            if used_total[rc] != tally.written[rc])


def run_loop(group: Group, label: str, query: str, roots: list[Provider]) -> None:
    """The loop on every server, in halves ordered A, B, B, A; then the capacity check."""
    s = group.settings
    path = "/allocation_candidates?" + query
    tallies = {x.impl: LoopTally(s.schedulers) for x in group.sessions}
    for half, session in enumerate(group.sessions + group.sessions[::-1]):
        tally = tallies[session.impl]
        if tally.boots.timed_out is not None:
            continue
        tally.merge(_run_half(group, session, path, half))
        if tally.boots.timed_out is not None:
            group._timed_out(session, label)
    names = {p.uuid: p.name for root in roots for p in root.walk()}
    for session in group.sessions:
        tally = tallies[session.impl]
        check_capacity(session, tally, names)
        group.record(session.impl, label, "loop", loop=tally, candidates=tally.candidates)
        if session.worker_rss is not None:
            rss = session.worker_rss()
            group.record(session.impl, "memory after the loop", "memory", rss=rss)
            print(f"    {session.impl}: resident memory per worker: "
                  + ", ".join(f"{r / 2**20:.0f} MB" for r in rss), flush=True)
        rate = tally.boots.rate
        over = tally.over_capacity
        print(f"    {session.impl}: {label}: {len(tally.boots.samples)} boots, "
              + ("-" if rate is None else f"{rate:.1f}/s")
              + f", {tally.failed} failed, {tally.conflicts} x 409, errors "
              f"{dict(tally.errors)}, over capacity: "
              + ("not checked" if over is None else ", ".join(over) or "none")
              + (f" ({tally.check_note})" if tally.check_note else ""), flush=True)


def loop_label(settings: Settings) -> str:
    size = (f"{settings.loop_seconds:g} s" if settings.loop_seconds
            else f"{settings.boots} boots each")
    return (f"{settings.schedulers} schedulers x {size}: GET limit={settings.loop_limit}, "
            "PUT a random candidate")


class Loop(Perfload):
    """Perfload's compute nodes (under names of their own), booted by the loop."""

    def __init__(self, providers: int) -> None:
        super().__init__(providers, with_claims=False)
        self.name = f"loop-{providers}"
        self.title = (f"scheduler loop, {providers} compute nodes (perfload's; "
                      "VCPU:1, MEMORY_MB:256, DISK_GB:10 per boot)")
        self.aggregate = stable_uuid(f"{self.name}-aggregate")

    def run(self, group: Group) -> None:
        s = group.settings
        query = PERFLOAD_QUERY.format(aggregate=self.aggregate) + f"&limit={s.loop_limit}"
        run_loop(group, loop_label(s), query, self.trees())


class LoopNested(Nested):
    """Nested's hosts, booted by the loop with nested's CPU + FPGA same_subtree query.

    Each NUMA node has room for 32 of these boots by VCPU and memory; its FPGA gets
    as many units (nested has 2), so the devices do not run out first.
    """

    FPGA_UNITS = 32
    QUERY = "CPU + FPGA in one NUMA subtree"

    def __init__(self, hosts: int) -> None:
        super().__init__(hosts)
        self.name = f"loopnested-{hosts}"
        self.title = (f"scheduler loop, nested: {hosts} compute nodes x (2 NUMA + 4 devices, "
                      f"FPGA {self.FPGA_UNITS} units); {self.QUERY}, isolate")

    def run(self, group: Group) -> None:
        s = group.settings
        query = dict(Nested.QUERIES)[self.QUERY] + f"&limit={s.loop_limit}"
        run_loop(group, loop_label(s), query, self.trees())


class Bug2126751(Scenario):
    """Upstream's bug 2126751: N granular groups of one device on N one-unit devices."""

    DEVICES = 8
    RESOURCE_CLASS = "PCI_DEVICE"
    name = "bug2126751"
    title = (f"upstream bug 2126751: one root with {DEVICES} one-unit {RESOURCE_CLASS} "
             f"children, {DEVICES} groups of one, group_policy=none")

    def trees(self) -> list[Provider]:
        host = f"{self.name}-host"
        return [Provider(name=host, children=[
            Provider(name=f"{host}-pci-{d}", inventories={self.RESOURCE_CLASS: {"total": 1}})
            for d in range(self.DEVICES)])]

    def query(self, limit: int | None) -> str:
        parts = [f"resources{g}={self.RESOURCE_CLASS}:1" for g in range(1, self.DEVICES + 1)]
        parts.append("group_policy=none")
        if limit is not None:
            parts.append(f"limit={limit}")
        return "&".join(parts)

    def run(self, group: Group) -> None:
        limit = group.settings.loop_limit
        group.measure_query(f"limit={limit}", self.query(limit), throughput=False)
        group.measure_query(f"no limit ({math.factorial(self.DEVICES):,} candidates "
                            "expected)", self.query(None), throughput=False)


def build(settings: Settings, only: set[str]) -> list[Scenario]:
    found: list[Scenario] = []
    if "loop" in only:
        found += [Loop(size) for size in settings.providers]
    if "loopnested" in only:
        found.append(LoopNested(settings.nested_hosts))
    if "bug2126751" in only:
        found.append(Bug2126751())
    return found
