#!/usr/bin/env python3
"""Benchmark allotment side by side with upstream Placement: ``python3 bench/run.py``.

For every workload and every implementation: a fresh database, a fresh server with
the same workers and threads, the same data loaded through the HTTP API, the same
requests timed. Results go to stdout and to bench/results/ (markdown and JSON).
See bench/README.md. Standard library only; run it with any Python >= 3.10.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import report
import scenarios
import scheduler
import servers
from http_client import PlacementClient
from loader import Loader, count_providers

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCENARIOS = ("perfload", "claims", "nested", "wide", "loop", "loopnested", "bug2126751",
             "explain", "headroom")


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="small sizes and few samples: a smoke check in a few minutes")
    p.add_argument("--only", default=",".join(SCENARIOS),
                   help=f"comma-separated workloads among {', '.join(SCENARIOS)}")
    p.add_argument("--impls", default="allotment,upstream",
                   help="which servers to start: allotment, upstream or both")
    p.add_argument("--url", help="benchmark this already running server only (no start, "
                                 "no database set-up; the data written is removed afterwards)")
    p.add_argument("--label", default="server", help="column name for --url")
    p.add_argument("--token", default="admin", help="X-Auth-Token to send")
    g = p.add_argument_group("servers")
    g.add_argument("--db", choices=["postgresql", "mysql", "sqlite"], default="postgresql")
    g.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432",
                   help="PostgreSQL server where a fresh database is created per run")
    g.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306",
                   help="MariaDB/MySQL server where a fresh database is created per run "
                        "(--db mysql)")
    g.add_argument("--workers", type=int, default=2, help="worker processes, both servers")
    g.add_argument("--threads", type=int, default=4, help="threads per worker, both servers")
    g.add_argument("--port-base", type=int, default=18500,
                   help="allotment listens here, upstream on the next port")
    g.add_argument("--allotment-bin", default=str(REPO / ".venv" / "bin" / "allotment"))
    g.add_argument("--baseline-bin",
                   help="an older allotment (e.g. a script running another checkout) to "
                        "measure side by side as 'baseline'; add baseline to --impls")
    g.add_argument("--upstream-venv", default=str(BENCH / ".upstream-venv"),
                   help="venv with openstack-placement and uwsgi; created if missing "
                        "(an existing one, e.g. /tmp/upstream-venv, saves the install)")
    g.add_argument("--upgrade-upstream", action="store_true",
                   help="reinstall the latest openstack-placement into --upstream-venv")
    g.add_argument("--workdir", help="where configs, logs and SQLite files go "
                                     "(default: a new temporary directory)")
    g.add_argument("--keep", action="store_true", help="keep databases and the workdir")
    s = p.add_argument_group("sizes (defaults follow the issue; --quick shrinks them)")
    s.add_argument("--providers", type=_ints, help="perfload sizes [1000,10000]")
    s.add_argument("--nested-hosts", type=int, help="nested compute nodes [300]")
    s.add_argument("--wide-roots", type=int, help="roots per wide shape [2]")
    s.add_argument("--wide-widths", type=_ints, help="device children per root [8,16]")
    s.add_argument("--wide-groups", type=int, help="VGPU:1 groups per wide query [6]")
    s.add_argument("--wide-max-candidates", type=int,
                   help="skip unlimited wide queries expected to return more [100000]")
    s.add_argument("--samples", type=int, help="sequential requests per latency [50]")
    s.add_argument("--requests", type=int, help="requests per throughput run [500]")
    s.add_argument("--concurrency", type=int, help="clients in throughput runs [10]")
    s.add_argument("--allocations", type=int, help="allocations written in perfload [100]")
    s.add_argument("--claims", type=int, help="claims in the claim-throughput run [500]")
    s.add_argument("--timeout", type=float, help="per-request timeout, seconds [60]")
    s.add_argument("--latency-budget", type=float,
                   help="stop sampling one latency after this many seconds [30]")
    s.add_argument("--throughput-budget", type=float,
                   help="stop one throughput run after this many seconds [120]")
    s.add_argument("--load-concurrency", type=int, help="threads loading data [8]")
    s.add_argument("--schedulers", type=int,
                   help="concurrent schedulers in the loop workloads [10]")
    s.add_argument("--boots", type=int,
                   help="boots per scheduler and server in the loop workloads (bounded by "
                        "--throughput-budget) [50]")
    s.add_argument("--loop-seconds", type=float,
                   help="run each server's loop this long instead of a number of boots")
    s.add_argument("--loop-limit", type=int,
                   help="limit= of the loop's queries (nova's [scheduler] "
                        "max_placement_results) and of bug2126751's first query [1000]")
    p.add_argument("--output", help="markdown file to write (default bench/results/<time>.md)")
    return p.parse_args(argv)


DEFAULTS = dict(providers=[1000, 10000], nested_hosts=300, wide_roots=2, wide_widths=[8, 16],
                wide_groups=6, wide_max_candidates=100_000, samples=50, requests=500,
                concurrency=10, allocations=100, claims=500, timeout=60.0,
                latency_budget=30.0, throughput_budget=120.0, load_concurrency=8,
                schedulers=10, boots=50, loop_seconds=None, loop_limit=1000)
QUICK = dict(DEFAULTS, providers=[100, 300], nested_hosts=20, wide_roots=1, samples=10,
             requests=50, allocations=20, claims=50, timeout=15.0, latency_budget=10.0,
             throughput_budget=20.0, boots=10)


def settings_from(args: argparse.Namespace) -> scenarios.Settings:
    base = QUICK if args.quick else DEFAULTS
    values = {key: getattr(args, key) if getattr(args, key) is not None else default
              for key, default in base.items()}
    return scenarios.Settings(**values)


class Target:
    """One implementation to benchmark: how to get a server of it for a scenario."""

    def __init__(self, name: str, command: servers.ServerCommand | None, port: int,
                 url: str | None = None) -> None:
        self.name = name
        self.command = command
        self.port = port
        self.url = url


def prepare(target: Target, scenario: scenarios.Scenario, roots: list,
            settings: scenarios.Settings, args: argparse.Namespace,
            dbs: servers.DatabaseFactory | None, workdir: Path,
            group: scenarios.Group, owned: list) -> scenarios.Session:
    """Give ``target`` a fresh database and server, and load the scenario's data."""
    server = None
    if target.command is not None:
        db = dbs.create(f"{target.name}_{scenario.name}")
        owned.append(lambda: None if args.keep else dbs.destroy(db))
        conf = servers.write_config(workdir / f"{target.name}-{scenario.name}",
                                    db.url_for(target.name))
        server = servers.RunningServer(target.command, conf, target.port,
                                       workdir / f"{target.name}-{scenario.name}.log")
        owned.append(server.stop)
        server.start()
        url = server.url
    else:
        url = target.url
    client = PlacementClient(url, token=args.token, timeout=settings.timeout)
    if server is not None:
        scenarios.warm_up(client, args.workers, args.threads)
    loader = Loader(client, settings.load_concurrency)
    seconds = loader.load(roots, progress=f"{target.name} {scenario.name}")
    count = count_providers(roots)
    group.record(target.name, f"{count} providers", "load", seconds=seconds,
                 requests=loader.requests)
    print(f"    {target.name}: loaded {count} providers in {seconds:.1f} s "
          f"({loader.requests} requests)", flush=True)
    return scenarios.Session(target.name, client, loader,
                             restart=_restarter(server, client, args),
                             worker_rss=server.worker_rss if server is not None else None)


def run_scenario(targets: list[Target], scenario: scenarios.Scenario,
                 settings: scenarios.Settings, args: argparse.Namespace,
                 dbs: servers.DatabaseFactory | None, workdir: Path,
                 failures: list[str]) -> list[scenarios.Measurement]:
    """Every target gets its own server and data; then the requests run side by side."""
    roots = scenario.trees()
    group = scenarios.Group(scenario.name, [], settings)
    owned: list = []  # clean-ups, run in reverse order
    try:
        for target in targets:
            if scenario.ours_only and target.command is not None \
                    and target.command.name != "allotment":
                print(f"  {target.name}: skipped (does not serve this endpoint)", flush=True)
                continue
            print(f"  {target.name}: loading", flush=True)
            try:
                group.sessions.append(prepare(target, scenario, roots, settings, args, dbs,
                                              workdir, group, owned))
            except Exception as exc:  # report it, measure the others
                failures.append(f"- {target.name}, {scenario.title}: {exc}")
                print(f"  {target.name}: FAILED: {exc}", flush=True)
        if group.sessions:
            scenario.run(group)
        for session in group.sessions:
            if session.restart is None:  # a server we do not own: leave it as we found it
                session.loader.cleanup(roots, session.consumers)
    except Exception as exc:
        failures.append(f"- {scenario.title}: {exc!r}")
        print(f"  FAILED: {exc!r}", flush=True)
    finally:
        for cleanup in reversed(owned):
            try:
                cleanup()
            except Exception as exc:  # noqa: PERF203 - every clean-up runs, whatever the others do
                print(f"  clean-up failed: {exc}", flush=True)
    return group.results


def _restarter(server: servers.RunningServer | None, client: PlacementClient,
               args: argparse.Namespace):
    if server is None:
        return None

    def restart() -> None:
        server.stop()
        server.start()
        scenarios.warm_up(client, args.workers, args.threads)

    return restart


def git_describe() -> str:
    out = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    unknown = only - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown workloads: {', '.join(sorted(unknown))}")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="allotment-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    facts = [f"command: `{shlex.join(['python3', 'bench/run.py', *sys.argv[1:]])}`",
             f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python "
             f"{platform.python_version()}",
             f"microversion 1.39; timeout per request {settings.timeout:g} s",
             "load average at start: %.2f %.2f %.2f" % os.getloadavg()]

    targets: list[Target] = []
    dbs = None
    if args.url:
        targets.append(Target(args.label, None, 0, url=args.url))
        facts.append(f"server: {args.url}")
    else:
        impls = [name.strip() for name in args.impls.split(",") if name.strip()]
        dbs = servers.DatabaseFactory(args.db, workdir, args.pg_url,
                                      str(Path(args.allotment_bin).parent / "python"),
                                      mysql_url=args.mysql_url)
        dbs.check()
        facts.append(f"database: {args.db}"
                     + (f" ({servers.redact(dbs.server_url)})" if args.db != "sqlite" else "")
                     + f"; a fresh one per server and workload; {args.workers} workers x "
                       f"{args.threads} threads for both")
        if "allotment" in impls and not Path(args.allotment_bin).exists():
            raise SystemExit(f"{args.allotment_bin} not found: run `make install` first")
        if "allotment" in impls:
            targets.append(Target("allotment", servers.ServerCommand(
                "allotment", args.allotment_bin, args.workers, args.threads),
                args.port_base))
            facts.append(f"allotment: {git_describe()} under `allotment serve`")
        if "baseline" in impls:
            if not args.baseline_bin:
                raise SystemExit("--impls baseline needs --baseline-bin")
            targets.append(Target("baseline", servers.ServerCommand(
                "allotment", args.baseline_bin, args.workers, args.threads),
                args.port_base + 2))
            facts.append(f"baseline: {args.baseline_bin} under `allotment serve`")
        if "upstream" in impls:
            venv = Path(args.upstream_venv)
            servers.ensure_upstream_venv(venv, args.upgrade_upstream)
            targets.append(Target("upstream", servers.ServerCommand(
                "upstream", str(venv / "bin" / "uwsgi"), args.workers, args.threads),
                args.port_base + 1))
            facts.append(f"upstream: openstack-placement {servers.upstream_version(venv)} "
                         "under uwsgi")

    started = time.monotonic()
    results: list[scenarios.Measurement] = []
    titles = {}
    failures = []
    for scenario in scenarios.build(settings, only) + scheduler.build(settings, only):
        titles[scenario.name] = scenario.title
        print(f"== {scenario.title}", flush=True)
        results += run_scenario(targets, scenario, settings, args, dbs, workdir, failures)

    names = [t.name for t in targets]
    if names == [report.OURS, report.THEIRS]:
        facts.append("ours/upstream: below 1 is better for times, above 1 for rates")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    lines = [f"# allotment benchmark, {stamp}", ""]
    lines += [f"- {fact}" for fact in facts]
    lines.append(f"- total run time: {(time.monotonic() - started) / 60:.1f} min; load "
                 "average at end: %.2f %.2f %.2f (other work on the machine skews "
                 "results)" % os.getloadavg())
    lines += ["", report.table(results, names, titles), ""]
    checks = report.wide_checks(results)
    if checks:
        lines += ["Wide-tree check:", *checks, ""]
    if failures:
        lines += ["Failures:", *failures, ""]
    text = "\n".join(lines)
    print("\n" + text)

    output = Path(args.output) if args.output else BENCH / "results" / f"{stamp}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    output.with_suffix(".json").write_text(json.dumps(
        {"facts": facts, "results": report.as_json(results), "failures": failures},
        indent=1))
    print(f"\nwritten to {output} (and .json)"
          + ("" if args.url else f"; server logs in {workdir}"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
