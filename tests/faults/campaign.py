"""A fault campaign: ``python -m tests.faults.campaign --minutes M --seed S --json FILE``.

Runs as root from the repository root (the packet filter needs root). Starts
the cluster and three servers (``--servers allotment``; ``upstream`` for
upstream Placement 16.0.0 on its own schema, without allotment's guard;
``upstream-guarded`` for upstream on allotment's schema), runs the schedulers and
the nemesis for ``--minutes``, heals everything, runs the checker, writes the
JSON report and prints a one-line summary last. Exits 0 only when nothing was
lost or overcommitted, every server and node agree, no generation went down
and no answer was a 5xx other than 503.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.faults import cloud as clouds
from tests.faults.checker import Snapshotter, check
from tests.faults.history import History
from tests.faults.nemesis import KINDS, Nemesis
from tests.faults.netfilter import PacketFilter
from tests.faults.workload import make_providers, run_schedulers

SCHEDULERS = 12


def run(minutes: float, seed: int, servers: str = "allotment",
        kinds: tuple[str, ...] = KINDS, schedulers: int = SCHEDULERS,
        workdir: Path | None = None, say: Any = print) -> dict[str, Any]:
    began = time.monotonic()
    workdir = workdir or Path(tempfile.mkdtemp(prefix="allotment-faults-"))
    missing = clouds.missing()
    if missing:
        raise RuntimeError(f"the campaign cannot run: {missing}")
    say(f"starting a 3-node Galera cluster and 3 {servers} servers in {workdir}")
    cloud = clouds.start(servers, workdir)
    try:
        with PacketFilter() as packets:
            return _campaign(cloud, packets, minutes, seed, kinds, schedulers, began, say)
    finally:
        cloud.stop()


def _campaign(cloud: clouds.Cloud, packets: PacketFilter, minutes: float, seed: int,
              kinds: tuple[str, ...], schedulers: int, began: float,
              say: Any) -> dict[str, Any]:
    urls = {s.name: s.url for s in cloud.servers}
    nodes = [(n.name, n.host, n.port) for n in cloud.cluster.nodes]
    providers = make_providers(cloud.servers[0].url, hot=3, cold=12, probes=3)
    history = History()
    stop = threading.Event()
    snapshots = Snapshotter(nodes, history.began)
    snapshot_thread = snapshots.start()
    threads = run_schedulers(schedulers, urls, providers, history, stop, seed)
    nemesis = Nemesis(cloud, packets, history, providers, nodes, seed)
    say(f"set up in {time.monotonic() - began:.0f} s; load and faults for {minutes:g} min")
    until = time.monotonic() + minutes * 60
    try:
        nemesis.run(kinds, until, stop)
        while time.monotonic() < until:
            time.sleep(0.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        packets.heal()
        snapshots.stop.set()
        snapshot_thread.join(timeout=30)
    clouds.wait_healed(cloud)
    say(f"{len(history.operations)} operations, {len(nemesis.faults)} faults; checking")
    result = check(history, nodes, urls, providers.every, snapshots.taken)
    report = _report(history, nemesis, result, cloud.kind, seed, minutes,
                     time.monotonic() - began, len(snapshots.taken), snapshots.unreadable)
    # A 500's cause is in the server's log, not in its answer: bring it here.
    report["examples"]["server_errors"] = clouds.server_errors(cloud)
    return report


def _report(history: History, nemesis: Nemesis, result: Any, kind: str, seed: int,
            minutes: float, seconds: float, snapshots: int,
            unreadable: int) -> dict[str, Any]:
    operations = history.operations
    outcomes = Counter(o.outcome for o in operations)
    writes = [o for o in operations if o.is_write]
    status_5xx = [o for o in operations if o.status is not None and o.status >= 500
                  and o.status != 503]
    no_retry_after = [o for o in operations if o.status == 503 and not o.retry_after]
    by_kind: dict[str, list[Any]] = {}
    for fault in nemesis.faults:
        by_kind.setdefault(fault.kind, []).append(fault)
    report = {
        "servers": kind,
        "seed": seed,
        "minutes": minutes,
        "seconds": round(seconds, 1),
        "faults": {k: len(v) for k, v in sorted(by_kind.items())},
        "operations": {
            "attempted": len(operations),
            "writes": len(writes),
            "acknowledged": outcomes["ok"],
            "refused": outcomes["refused"],
            "unavailable": outcomes["unavailable"],
            "indeterminate": outcomes["indeterminate"],
        },
        "lost": len(result.lost),
        # Providers found over capacity (on any node, at any snapshot), and how often.
        "overcommitted": len(result.overcommitted_providers),
        "overcommitted_observations": len(result.overcommitted),
        "status_5xx": len(status_5xx),
        "servers_disagree": len(result.servers_disagree),
        "generations_decreased": len(result.generations_decreased),
        # allotment's allocation history (its own table) against the nodes and the
        # acknowledged writes; "absent" on upstream's schema.
        "recorded_history": result.recorded_history,
        "history_disagrees": len(result.history_disagrees),
        "unavailable_without_retry_after": len(no_retry_after),
        # Consumers whose last write had no definite answer, as the nodes resolved it.
        "uncertain_resolved": result.resolved,
        "recovery_s": {k: round(max(f.recovery_s for f in v), 2)
                       for k, v in sorted(by_kind.items())},
        "staleness_s": {k: round(max(f.staleness_s for f in v), 2)
                        for k, v in sorted(by_kind.items())},
        "snapshots": {"taken": snapshots, "node_unreadable": unreadable},
        "fault_log": [f.as_dict() for f in nemesis.faults],
        "examples": {
            "lost": result.lost[:10],
            "overcommitted": result.overcommitted[:10],
            "servers_disagree": result.servers_disagree[:10],
            "generations_decreased": result.generations_decreased[:10],
            "history_disagrees": result.history_disagrees[:10],
            # Writes answered 503 (or not sent) that the nodes hold: allowed (a
            # connection lost at COMMIT), listed to see when it happens.
            "applied_after_503": result.applied_after_503[:10],
            "status_5xx": [f"{o.kind} via {o.server}: {o.status} {o.error[:200]}"
                           for o in status_5xx[:10]],
        },
    }
    report["clean"] = is_clean(report)
    return report


def is_clean(report: dict[str, Any]) -> bool:
    return not (report["lost"] or report["overcommitted"] or report["status_5xx"]
                or report["servers_disagree"] or report["generations_decreased"]
                or report["history_disagrees"])


def summary(report: dict[str, Any]) -> str:
    ops = report["operations"]
    faults = sum(report["faults"].values())
    return (f"{'CLEAN' if report['clean'] else 'FAILED'} {report['servers']} seed "
            f"{report['seed']}: {faults} faults, {ops['attempted']} operations "
            f"({ops['acknowledged']} acknowledged, {ops['refused']} refused, "
            f"{ops['unavailable']} unavailable, {ops['indeterminate']} indeterminate), "
            f"lost {report['lost']}, overcommitted {report['overcommitted']}, "
            f"5xx {report['status_5xx']}, recovery max "
            f"{max(report['recovery_s'].values(), default=0):.1f} s, staleness max "
            f"{max(report['staleness_s'].values(), default=0):.1f} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.campaign",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="write the report here")
    parser.add_argument("--servers", choices=clouds.KINDS, default="allotment")
    parser.add_argument("--faults", default=",".join(KINDS),
                        help="comma-separated fault kinds; empty: load only")
    parser.add_argument("--schedulers", type=int, default=SCHEDULERS)
    args = parser.parse_args(argv)
    kinds = tuple(k for k in args.faults.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown fault kinds: {sorted(unknown)}")
    report = run(args.minutes, args.seed, args.servers, kinds, args.schedulers)
    text = json.dumps(report, indent=2)
    if args.json:
        args.json.write_text(text + "\n")
    else:
        print(text)
    print(summary(report))
    return 0 if report["clean"] else 1


if __name__ == "__main__":
    sys.exit(main())
