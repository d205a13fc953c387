#!/usr/bin/env python3
"""The cloud day: how many nova compute hosts one Placement server carries, every answer fast.

``python3 bench/cloud_day.py`` (see bench/README.md). For each implementation and each
number of hosts N: a fresh database, a fresh server (the same workers and threads for
both), N hosts shaped as nova's libvirt driver reports them, pre-filled to half their
memory, then what a cloud of N hosts asks all day, sent open-loop at its scheduled
times:

- every host's ``update_available_resource`` periodic task (60 s): its provider's
  allocations; every ``resource_provider_association_refresh`` (300 s): its aggregates
  (1.19), its traits (1.6) and the sharing providers of its aggregates (1.18); each
  host's calls spread evenly over the interval;
- boots at 2/s per 10,000 hosts: candidates at 1.36 (``limit=1000``,
  ``root_required=OWNER_NOVA,!COMPUTE_STATUS_DISABLED``), hosts tried in the order of
  nova's spread weigher (most free memory first), the claim as nova's report client
  makes it (``PUT /allocations/{instance}`` at 1.36 with the candidate's body), a 409
  ``placement.concurrent_update`` retried as nova's ``@retries`` does (4 attempts,
  random pauses), any other 409 moving on to the next host;
- cold migrations at a tenth of the boot rate (the conductor's swap of the instance's
  allocations to a migration consumer, a new claim, the confirm's removal of the
  migration's) and deletes at the boot rate (nova's GET then PUT of empty allocations).

Latency counts from the scheduled time, so a server that falls behind shows it. The
generator must keep to its schedule: when it hands requests out late (its own
fault, not the server's), the run is reported INVALID rather than as a result.
The cloud and nova's requests are in bench/nova_cloud.py, the open-loop generator and
the CPU meters in bench/open_loop.py. Standard library only, like bench/run.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import resource
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import open_loop
import scenarios
import servers
from http_client import PlacementClient, Prepared
from measure import percentile
from nova_cloud import (
    ACTION_KINDS,
    CANDIDATES_VERSION,
    FLAVORS,
    PERIODIC_KINDS,
    Cloud,
    Instances,
    Rates,
    build_schedule,
    load_cloud,
    nova_actors,
    periodic_requests,
)
from open_loop import CpuMeter, KindTally, RunTally, database_pids, descendants
from report import fmt_time

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent

# --- one run ----------------------------------------------------------------------------

@dataclass
class DaySettings:
    warmup: float = 60.0
    window: float = 300.0
    rates: Rates = field(default_factory=Rates)
    senders: int = 32
    timeout: float = 30.0
    probe_requests: int = 200  # per kind, for the server's CPU per call
    limit: float = 1.0  # p99 a carried server stays under, seconds
    lag_limit: float = 0.05  # the generator is behind when 1 % of hand-outs are later


@dataclass
class DayResult:
    impl: str
    hosts: int
    variant: str
    database: str
    tally: RunTally
    window: float
    load_seconds: float | None = None
    load_requests: int | None = None
    server_cpu: float | None = None  # cores (CPU seconds per second) over the window
    database_cpu: float | None = None
    generator_cpu: float | None = None
    rss: list[int] = field(default_factory=list)
    cpu_per_call: dict[str, float] = field(default_factory=dict)  # kind: server CPU s/call
    boot_rate_scheduled: float = 0.0
    instances: Instances | None = None  # what the cloud holds at the end, as sent
    window_span: tuple[float, float] = (0.0, 0.0)  # time.time() at its start and end
    models: list[ModelCost] = field(default_factory=list)  # allotment's, per worker


    @property
    def lag_p99(self) -> float:
        lags = self.tally.dispatch_lags
        return percentile(lags, 99) if lags else 0.0

    def invalid(self, settings: DaySettings) -> str:
        """Why the run is not a result (the generator fell behind), or ""."""
        if self.lag_p99 > settings.lag_limit:
            return (f"the generator fell behind its schedule (p99 hand-out "
                    f"{self.lag_p99 * 1000:.0f} ms late; its longest collection "
                    f"{self.tally.longest_collection * 1000:.0f} ms)")
        return ""

    @property
    def errors(self) -> int:
        return self.tally.not_sent + sum(k.errors for k in self.tally.kinds.values())

    @property
    def boots_per_second(self) -> float:
        return len(self.tally.kind("boot").latencies) / self.window

    @property
    def conflicts_per_boot(self) -> float | None:
        boot = self.tally.kind("boot")
        attempted = len(boot.latencies) + boot.errors
        return boot.conflicts / attempted if attempted else None

    def verdict(self, settings: DaySettings) -> tuple[bool, str]:
        """Whether the server carried this cloud: every periodic call and boot under
        the limit at p99, no errors, a valid run."""
        why = self.invalid(settings)
        if why:
            return False, "INVALID: " + why
        slow = [kind for kind in (*PERIODIC_KINDS, "boot")
                if (p99 := self.tally.kind(kind).p(99)) is not None and p99 >= settings.limit]
        problems = []
        if slow:
            problems.append("p99 >= %g s: %s" % (settings.limit, ", ".join(slow)))
        if self.errors:
            problems.append(f"{self.errors} errors")
        missing = [kind for kind in (*PERIODIC_KINDS, "boot")
                   if self.tally.scheduled[kind] and not self.tally.kind(kind).latencies]
        if missing:
            problems.append("nothing answered: " + ", ".join(missing))
        return (not problems), ("carried" if not problems else "; ".join(problems))

    def as_dict(self, settings: DaySettings) -> dict:
        carried, why = self.verdict(settings)
        return {"impl": self.impl, "hosts": self.hosts, "variant": self.variant,
                "database": self.database, "window_s": self.window,
                "load_s": self.load_seconds, "load_requests": self.load_requests,
                "server_cpu": self.server_cpu, "database_cpu": self.database_cpu,
                "generator_cpu": self.generator_cpu, "rss": self.rss,
                "cpu_per_call_s": self.cpu_per_call, "carried": carried, "verdict": why,
                "dispatch_lag_p99_s": self.lag_p99, "not_sent": self.tally.not_sent,
                "generator_longest_collection_s": self.tally.longest_collection,
                "boots_per_s": self.boots_per_second,
                "boots_per_s_scheduled": self.boot_rate_scheduled,
                "conflicts_per_boot": self.conflicts_per_boot,
                "scheduled": dict(self.tally.scheduled),
                "read_models": [vars(m) for m in self.models],
                "kinds": {k: t.as_dict() for k, t in self.tally.kinds.items()}}


@dataclass
class ModelCost:
    """One allotment worker's read model, from what the worker logged: its first
    load, and its upkeep in the window (the lines that end in it)."""

    pid: int
    providers: int = 0
    load_ms: float = 0.0
    load_cpu_ms: float = 0.0
    resident_mib: float | None = None
    upkeep_cpu_ms: float = 0.0
    upkeep_seconds: float = 0.0
    changes: int = 0

    @property
    def upkeep_share(self) -> float | None:
        """Of a core, over the window's upkeep lines."""
        return self.upkeep_cpu_ms / 1000 / self.upkeep_seconds if self.upkeep_seconds else None


_LOGGED_AT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) (\d+) ")
_MODEL_LOADED = re.compile(r"Read model loaded \(first request\): (\d+) providers in (\d+) ms "
                           r"\((\d+) ms of CPU\)(?:, resident memory ([+-]\d+) MiB)?")
_MODEL_UPKEEP = re.compile(r"Read model upkeep over (\d+) s: \d+ polls, (\d+) changes applied, "
                           r".*?, (\d+) ms of CPU")


def model_costs(log: Path, window: tuple[float, float]) -> list[ModelCost]:
    """Each worker's read model as its log lines tell (allotment's log format:
    local time, pid); the upkeep of the lines written during the window."""
    workers: dict[int, ModelCost] = {}
    if not log.exists():
        return []
    for line in log.read_text(errors="replace").splitlines():
        # Most of a day's lines are requests': the cheap test first.
        if "Read model" not in line or (head := _LOGGED_AT.match(line)) is None:
            continue
        at = datetime.datetime.strptime(head.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp()
        pid = int(head.group(2))
        cost = workers.get(pid) or workers.setdefault(pid, ModelCost(pid))
        if (loaded := _MODEL_LOADED.search(line)) is not None:
            cost.providers, cost.load_ms, cost.load_cpu_ms = (
                int(loaded.group(1)), float(loaded.group(2)), float(loaded.group(3)))
            if loaded.group(4) is not None:
                cost.resident_mib = float(loaded.group(4))
        elif (upkeep := _MODEL_UPKEEP.search(line)) is not None and \
                window[0] < at <= window[1]:
            cost.upkeep_seconds += float(upkeep.group(1))
            cost.changes += int(upkeep.group(2))
            cost.upkeep_cpu_ms += float(upkeep.group(3))
    return [cost for _, cost in sorted(workers.items()) if cost.providers]


def probe_cpu_per_call(url: str, cloud: Cloud, server_pid: int, requests: int,
                       timeout: float) -> dict[str, float]:
    """The server's CPU for one call of each periodic kind (and one boot's candidates),
    each kind alone from 4 keep-alive clients: the server's CPU over the probe divided
    by the calls made."""
    client = PlacementClient(url, timeout=timeout)
    rng = random.Random("cloudday-probe")
    hosts = [rng.choice(cloud.hosts) for _ in range(requests)]
    per_kind: dict[str, list[Prepared]] = {kind: [] for kind in PERIODIC_KINDS}
    for host in hosts:
        for kind, prepared in periodic_requests(client, host).items():
            per_kind[kind].append(prepared)
    per_kind["candidates"] = [client.prepare(
        "GET", f"/allocation_candidates?{FLAVORS[i % len(FLAVORS)].query}&limit=1000"
               "&root_required=OWNER_NOVA,!COMPUTE_STATUS_DISABLED",
        microversion=CANDIDATES_VERSION) for i in range(max(4, requests // 10))]

    def send_all(chunk: list[Prepared]) -> list[int]:
        try:
            return [client.send(prepared).status for prepared in chunk]
        finally:
            client.close_own()  # the other probes' threads still send

    found = {}
    for kind, prepared in per_kind.items():
        meter = CpuMeter(lambda: descendants(server_pid))
        meter.start()
        with ThreadPoolExecutor(4) as pool:
            statuses = [status for part in pool.map(send_all, [prepared[i::4] for i in range(4)])
                        for status in part]
        used, _ = meter.stop()
        if all(status == 200 for status in statuses):
            found[kind] = used / len(prepared)
    return found


def run_day(url: str, cloud: Cloud, settings: DaySettings, impl: str, server_pid: int,
            database_kind: str, database_name: str) -> DayResult:
    """The cloud's day on a loaded server: the warm-up, the window, then the probes."""
    instances = Instances()
    for host in cloud.hosts:
        for uuid, flavor in cloud.prefill(host):
            instances.add(uuid, host.uuid, flavor)
    generator = open_loop.Generator(url, settings.senders, settings.timeout,
                                    nova_actors(instances, settings.timeout))
    events = build_schedule(generator.client, cloud, settings.rates,
                            settings.warmup + settings.window)
    server = CpuMeter(lambda: descendants(server_pid))
    database = CpuMeter(lambda: database_pids(database_kind, database_name))
    own: dict[str, float] = {}

    span: dict[str, float] = {}

    def start_meters() -> None:  # when the window opens
        span["start"] = time.time()
        server.start()
        database.start()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        own["cpu"] = usage.ru_utime + usage.ru_stime

    timer = threading.Timer(settings.warmup + 0.2, start_meters)
    timer.start()
    tally = generator.run(events, settings.warmup, settings.window)
    for kind in (*PERIODIC_KINDS, *ACTION_KINDS):
        tally.kind(kind)  # shown, even when none was scheduled
    timer.join()
    span["end"] = time.time()
    server_used, wall = server.stop()
    database_used, _ = database.stop()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own_used = usage.ru_utime + usage.ru_stime - own["cpu"]
    result = DayResult(impl, cloud.size, "sriov" if cloud.sriov else "flat", database_kind,
                       tally, settings.window)
    result.server_cpu = server_used / wall
    result.database_cpu = database_used / wall
    result.generator_cpu = own_used / wall
    result.boot_rate_scheduled = settings.rates.action_rate("boot", cloud.size)
    result.instances = instances
    result.rss = servers.worker_rss(server_pid)
    result.window_span = (span["start"], span["end"])
    if settings.probe_requests:
        result.cpu_per_call = probe_cpu_per_call(url, cloud, server_pid,
                                                 settings.probe_requests, settings.timeout)
    return result


# --- the report -------------------------------------------------------------------------

def _pp(tally: KindTally) -> str:
    if not tally.latencies:
        return "-"
    return f"{fmt_time(tally.p(50))} / {fmt_time(tally.p(99))}"


def render(results: list[DayResult], settings: DaySettings) -> str:
    lines = ["| hosts (boots/s) | server | allocations p50 / p99 | aggregates | traits | "
             "sharing | boot p50 / p99 | move | delete | boots/s done | errors | "
             "409s per boot | server CPU | database CPU | generator CPU | RSS per worker | "
             "load | verdict |",
             "|" + "---|" * 18]
    for r in results:
        kinds = {k: r.tally.kind(k) for k in (*PERIODIC_KINDS, *ACTION_KINDS)}
        carried, why = r.verdict(settings)
        rss = ", ".join(f"{b / 2**20:.0f}" for b in r.rss) + " MB" if r.rss else "-"
        per_boot = r.conflicts_per_boot
        lines.append("| " + " | ".join([
            f"{r.hosts:,} ({r.boot_rate_scheduled:.2g}){', sriov' if r.variant == 'sriov' else ''}",
            r.impl, *(_pp(kinds[k]) for k in (*PERIODIC_KINDS, *ACTION_KINDS)),
            f"{r.boots_per_second:.2f}", str(r.errors),
            "-" if per_boot is None else f"{per_boot:.2f}",
            f"{r.server_cpu:.2f}", f"{r.database_cpu:.2f}", f"{r.generator_cpu:.2f}", rss,
            "-" if r.load_seconds is None else f"{r.load_seconds:.0f} s",
            ("**" + why + "**") if not carried else why]) + " |")
    if any(r.cpu_per_call for r in results):
        kinds = (*PERIODIC_KINDS, "candidates")
        lines += ["", "Server CPU per call, each kind alone (4 clients, "
                  f"{settings.probe_requests} calls; candidates a tenth):", "",
                  "| hosts | server | " + " | ".join(kinds) + " |",
                  "|" + "---|" * (2 + len(kinds))]
        for r in results:
            lines.append(f"| {r.hosts:,} | {r.impl} | " + " | ".join(
                f"{r.cpu_per_call[k] * 1000:.2f} ms" if k in r.cpu_per_call else "-"
                for k in kinds) + " |")
    models = [(r.hosts, m) for r in results for m in r.models]
    if models:
        lines += ["", render_models(models)]
    return "\n".join(lines)


def render_models(models: list[tuple[int, ModelCost]]) -> str:
    """The read models of allotment's workers, by number of hosts."""
    lines = ["Each allotment worker's read model: its first load (and the resident memory "
             "it added), and its upkeep in the window (polls of the change log, the changes "
             "applied, periodic checks), from the workers' logs:", "",
             "| hosts | worker | providers | load (CPU) | resident memory added | "
             "upkeep: CPU of a core | changes applied per s |",
             "|" + "---|" * 7]
    for hosts, m in models:
        share = m.upkeep_share
        lines.append(" | ".join([
            f"| {hosts:,}", str(m.pid), f"{m.providers:,}",
            f"{m.load_ms:.0f} ms ({m.load_cpu_ms:.0f} ms)",
            "-" if m.resident_mib is None else f"{m.resident_mib:+.0f} MiB",
            "-" if share is None else f"{share * 100:.2f} %",
            "-" if not m.upkeep_seconds else f"{m.changes / m.upkeep_seconds:.1f}"]) + " |")
    return "\n".join(lines)


def largest_carried(results: list[DayResult], settings: DaySettings) -> list[str]:
    lines = []
    for impl in dict.fromkeys(r.impl for r in results):
        carried = [r.hosts for r in results if r.impl == impl and r.verdict(settings)[0]]
        failed = [r.hosts for r in results if r.impl == impl and not r.verdict(settings)[0]]
        text = f"- {impl}: largest N carried: " + (f"{max(carried):,}" if carried else "none")
        if failed:
            text += f"; not carried: {', '.join(f'{n:,}' for n in failed)}"
        lines.append(text)
    return lines


# --- side by side -----------------------------------------------------------------------

_ANALYZE_SCRIPT = """
import sys
from sqlalchemy import create_engine, inspect, text
engine = create_engine(sys.argv[1].replace("postgresql://", "postgresql+psycopg://", 1)
                       .replace("mysql://", "mysql+pymysql://", 1))
with engine.connect() as conn:
    if engine.dialect.name == "postgresql":
        conn.execute(text("ANALYZE"))
    else:
        for table in inspect(conn).get_table_names():
            conn.execute(text(f"ANALYZE TABLE `{table}`"))
    conn.commit()
"""


def database_name(url: str) -> str:
    return urllib.parse.urlsplit(url).path.lstrip("/")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke check: 100 hosts at ten times nova's rates, 10 s warm-up, "
                        "30 s window")
    p.add_argument("--hosts", default="1000,5000,10000,20000,50000",
                   help="numbers of hosts, ascending; an implementation stops at the first "
                        "it does not carry (see --every-size)")
    p.add_argument("--every-size", action="store_true",
                   help="run every size even after one was not carried")
    p.add_argument("--sriov", action="store_true",
                   help="a tenth of the hosts with an SR-IOV agent and two physical "
                        "functions below; a sharing DISK_GB pool per rack aggregate")
    p.add_argument("--impls", default="allotment,upstream")
    p.add_argument("--db", choices=["postgresql", "mysql"], default="postgresql")
    p.add_argument("--analyze", action="store_true",
                   help="gather the database's statistics after the load (ANALYZE)")
    p.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432")
    p.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--port-base", type=int, default=18600,
                   help="allotment listens here, upstream on the next port")
    p.add_argument("--allotment-bin", default=str(REPO / ".venv" / "bin" / "allotment"))
    p.add_argument("--upstream-venv", default=str(BENCH / ".upstream-venv"))
    p.add_argument("--warmup", type=float, help="seconds sent before the window [60]")
    p.add_argument("--window", type=float, help="seconds measured [300]")
    p.add_argument("--rate-scale", type=float,
                   help="every rate times this (2: the traffic of twice the hosts) [1]")
    p.add_argument("--senders", type=int, default=32,
                   help="concurrent connections of the generator")
    p.add_argument("--timeout", type=float, default=30.0, help="per request, seconds")
    p.add_argument("--probe-requests", type=int, default=200,
                   help="calls per kind measured alone for the CPU per call (0: none)")
    p.add_argument("--load-concurrency", type=int, default=8)
    p.add_argument("--workdir")
    p.add_argument("--keep", action="store_true", help="keep databases and the workdir")
    p.add_argument("--output", help="markdown file (default bench/results/cloudday-<time>.md)")
    args = p.parse_args(argv)
    quick = args.quick
    if args.warmup is None:
        args.warmup = 10.0 if quick else 60.0
    if args.window is None:
        args.window = 30.0 if quick else 300.0
    if args.rate_scale is None:
        args.rate_scale = 10.0 if quick else 1.0
    if quick and args.hosts == p.get_default("hosts"):
        args.hosts = "100"
    if quick and args.probe_requests == p.get_default("probe_requests"):
        args.probe_requests = 50
    return args


def run_one(impl: str, command: servers.ServerCommand, port: int, cloud: Cloud,
            settings: DaySettings, args: argparse.Namespace, dbs: servers.DatabaseFactory,
            workdir: Path) -> DayResult:
    """A fresh database and server for one implementation, the cloud loaded, its day."""
    tag = f"{impl}_{cloud.size}{'_sriov' if cloud.sriov else ''}"
    db = dbs.create(f"cd_{tag}")
    server = None
    try:
        conf = servers.write_config(workdir / tag, db.url_for(impl))
        server = servers.RunningServer(command, conf, port, workdir / f"{tag}.log")
        server.start()
        scenarios.warm_up(PlacementClient(server.url), args.workers, args.threads)
        print(f"  {impl}: loading {cloud.size:,} hosts", flush=True)
        seconds, requests = load_cloud(server.url, cloud, args.load_concurrency)
        print(f"  {impl}: loaded in {seconds:.1f} s ({requests} requests)", flush=True)
        if args.analyze:
            subprocess.run([dbs.admin_python, "-c", _ANALYZE_SCRIPT, db.url], check=True)
        assert server.process is not None
        print(f"  {impl}: {settings.warmup:g} s warm-up, {settings.window:g} s window",
              flush=True)
        result = run_day(server.url, cloud, settings, impl, server.process.pid, args.db,
                         database_name(db.url))
        result.load_seconds, result.load_requests = seconds, requests
        result.models = model_costs(workdir / f"{tag}.log", result.window_span)
        return result
    finally:
        if server is not None:
            server.stop()
        if not args.keep:
            dbs.destroy(db)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted(int(n) for n in args.hosts.split(",") if n.strip())
    impls = [name.strip() for name in args.impls.split(",") if name.strip()]
    settings = DaySettings(warmup=args.warmup, window=args.window,
                           rates=Rates(args.rate_scale), senders=args.senders,
                           timeout=args.timeout, probe_requests=args.probe_requests)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="allotment-cloudday-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dbs = servers.DatabaseFactory(args.db, workdir, args.pg_url,
                                  str(Path(args.allotment_bin).parent / "python"),
                                  mysql_url=args.mysql_url)
    dbs.check()
    commands: dict[str, tuple[servers.ServerCommand, int]] = {}
    facts = [f"command: `{shlex.join(['python3', 'bench/cloud_day.py', *sys.argv[1:]])}`",
             f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}",
             f"database: {args.db} ({servers.redact(dbs.server_url)}), a fresh one per "
             f"server and size{', ANALYZE after the load' if args.analyze else ''}; "
             f"{args.workers} workers x {args.threads} threads for both",
             f"rates x{args.rate_scale:g}; warm-up {args.warmup:g} s, window "
             f"{args.window:g} s; {args.senders} connections; timeout {args.timeout:g} s",
             "load average at start: %.2f %.2f %.2f" % os.getloadavg()]
    if "allotment" in impls:
        if not Path(args.allotment_bin).exists():
            raise SystemExit(f"{args.allotment_bin} not found: run `make install` first")
        commands["allotment"] = (servers.ServerCommand(
            "allotment", args.allotment_bin, args.workers, args.threads), args.port_base)
    if "upstream" in impls:
        venv = Path(args.upstream_venv)
        servers.ensure_upstream_venv(venv)
        commands["upstream"] = (servers.ServerCommand(
            "upstream", str(venv / "bin" / "uwsgi"), args.workers, args.threads),
            args.port_base + 1)
        facts.append(f"upstream: openstack-placement {servers.upstream_version(venv)} "
                     "under uwsgi")
    results: list[DayResult] = []
    failures: list[str] = []
    stopped: set[str] = set()
    for size in sizes:
        cloud = Cloud(size, sriov=args.sriov)
        print(f"== {size:,} hosts{' (sriov)' if args.sriov else ''}", flush=True)
        for impl, (command, port) in commands.items():
            if impl in stopped:
                continue
            try:
                result = run_one(impl, command, port, cloud, settings, args, dbs, workdir)
            except Exception as exc:  # report it, go on with the others
                failures.append(f"- {impl}, {size:,} hosts: {exc!r}")
                print(f"  {impl}: FAILED: {exc!r}", flush=True)
                stopped.add(impl)
                continue
            results.append(result)
            carried, why = result.verdict(settings)
            print(f"  {impl}: {why}", flush=True)
            print(render([result], settings), flush=True)
            if not carried and not args.every_size:
                stopped.add(impl)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    text = "\n".join([f"# cloud day, {stamp}", "", *[f"- {fact}" for fact in facts],
                      "- load average at end: %.2f %.2f %.2f" % os.getloadavg(), "",
                      render(results, settings), "", *largest_carried(results, settings),
                      *(["", "Failures:", *failures] if failures else [])])
    print("\n" + text)
    output = Path(args.output) if args.output else BENCH / "results" / f"cloudday-{stamp}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text + "\n")
    output.with_suffix(".json").write_text(json.dumps(
        {"facts": facts, "results": [r.as_dict(settings) for r in results],
         "failures": failures}, indent=1))
    print(f"\nwritten to {output} (and .json); server logs in {workdir}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
