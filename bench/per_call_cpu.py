#!/usr/bin/env python3
"""Server CPU per periodic call: ``python3 bench/per_call_cpu.py``.

What every ``nova-compute`` asks Placement on its timers (issue 40): its
provider's allocations (every 60 s), and its aggregates, traits and sharing
providers (every 300 s). At 10,000 hosts that is 270 calls a second before a
single boot, so the server's CPU per call decides how many hosts one server
carries. This measures it alone: a fresh database and server (``allotment
serve``, 2 workers x 4 threads by default; upstream 16.0.0 under uwsgi too
with ``--impls allotment,upstream``), one provider shaped like nova's libvirt
host (VCPU 64 at 4.0, MEMORY_MB 262144 with 512 reserved, DISK_GB 4096, four
aggregates, nova's capability traits plus ``OWNER_NOVA``, 24 consumers) and a
sharing provider in one of its aggregates; then, per kind of call, N calls
over 4 keep-alive connections, and the CPU (user + system) the server's
processes spent meanwhile, read from /proc before and after. With several
servers (``--impls allotment,baseline --baseline-bin OLD/allotment`` to
compare with an older checkout) they run side by side and are measured in
turn, kind by kind, for a few rounds: the median round is reported.

The figure is CPU, not latency: it does not depend on the client's speed,
only on the other work the server does (none here). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import servers
from http_client import PlacementClient

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TICK = os.sysconf("SC_CLK_TCK")

# The traits nova's libvirt driver reports for a typical x86 host, and nova's own.
HOST_TRAITS = [
    "COMPUTE_ACCELERATORS", "COMPUTE_ADDRESS_SPACE_EMULATED", "COMPUTE_ADDRESS_SPACE_PASSTHROUGH",
    "COMPUTE_DEVICE_TAGGING", "COMPUTE_GRAPHICS_MODEL_BOCHS", "COMPUTE_GRAPHICS_MODEL_CIRRUS",
    "COMPUTE_GRAPHICS_MODEL_NONE", "COMPUTE_GRAPHICS_MODEL_VGA", "COMPUTE_GRAPHICS_MODEL_VIRTIO",
    "COMPUTE_IMAGE_TYPE_AMI", "COMPUTE_IMAGE_TYPE_AKI", "COMPUTE_IMAGE_TYPE_ARI",
    "COMPUTE_IMAGE_TYPE_ISO", "COMPUTE_IMAGE_TYPE_QCOW2", "COMPUTE_IMAGE_TYPE_RAW",
    "COMPUTE_NET_ATTACH_INTERFACE", "COMPUTE_NET_ATTACH_INTERFACE_WITH_TAG",
    "COMPUTE_NET_VIF_MODEL_E1000", "COMPUTE_NET_VIF_MODEL_VIRTIO", "COMPUTE_NODE",
    "COMPUTE_RESCUE_BFV", "COMPUTE_SECURITY_UEFI_SECURE_BOOT", "COMPUTE_SOCKET_PCI_NUMA_AFFINITY",
    "COMPUTE_STORAGE_BUS_SATA", "COMPUTE_STORAGE_BUS_SCSI", "COMPUTE_STORAGE_BUS_USB",
    "COMPUTE_STORAGE_BUS_VIRTIO", "COMPUTE_TRUSTED_CERTS", "COMPUTE_VOLUME_ATTACH_WITH_TAG",
    "COMPUTE_VOLUME_EXTEND", "COMPUTE_VOLUME_MULTI_ATTACH", "HW_CPU_X86_AVX2", "HW_CPU_X86_SSE42",
    "OWNER_NOVA",
]
# Four flavors, six instances of each: about half the host's memory.
FLAVORS = [{"VCPU": 1, "MEMORY_MB": 2048, "DISK_GB": 20},
           {"VCPU": 2, "MEMORY_MB": 4096, "DISK_GB": 40},
           {"VCPU": 4, "MEMORY_MB": 8192, "DISK_GB": 80},
           {"VCPU": 8, "MEMORY_MB": 8192, "DISK_GB": 160}]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of ``pids`` so far (fields 14 and 15 of /proc/PID/stat)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def server_pids(server: servers.RunningServer) -> list[int]:
    assert server.process is not None
    return [server.process.pid, *servers._children(server.process.pid)]


def load_host(client: PlacementClient) -> dict[str, str]:
    """One compute host and one sharing provider; returns the calls' paths by kind."""
    host, shared = str(uuid.uuid4()), str(uuid.uuid4())
    aggregates = [str(uuid.uuid4()) for _ in range(4)]

    def must(reply, what: str):
        if not reply.ok:
            raise SystemExit(f"{what}: {reply.describe()}")
        return reply

    for name, rp in (("compute-0001", host), ("shared-storage", shared)):
        must(client.post("/resource_providers", {"name": name, "uuid": rp}), "create provider")
    must(client.put(f"/resource_providers/{host}/inventories", {
        "resource_provider_generation": 0, "inventories": {
            "VCPU": {"total": 64, "allocation_ratio": 4.0},
            "MEMORY_MB": {"total": 262144, "reserved": 512},
            "DISK_GB": {"total": 4096}}}), "host inventories")
    must(client.put(f"/resource_providers/{host}/aggregates", {
        "resource_provider_generation": 1, "aggregates": aggregates}), "host aggregates")
    must(client.put(f"/resource_providers/{host}/traits", {
        "resource_provider_generation": 2, "traits": HOST_TRAITS}), "host traits")
    must(client.put(f"/resource_providers/{shared}/inventories", {
        "resource_provider_generation": 0, "inventories": {"DISK_GB": {"total": 100000}}}),
        "shared inventories")
    must(client.put(f"/resource_providers/{shared}/aggregates", {
        "resource_provider_generation": 1, "aggregates": aggregates[:1]}), "shared aggregates")
    must(client.put(f"/resource_providers/{shared}/traits", {
        "resource_provider_generation": 2, "traits": ["MISC_SHARES_VIA_AGGREGATE"]}),
        "shared traits")
    project, user = str(uuid.uuid4()), str(uuid.uuid4())
    for index in range(24):
        flavor = FLAVORS[index % len(FLAVORS)]
        must(client.put(f"/allocations/{uuid.uuid4()}", {
            "allocations": {host: {"resources": flavor}}, "project_id": project,
            "user_id": user, "consumer_generation": None,
            "consumer_type": "INSTANCE"}), "allocation")
    return {
        "GET /": "/",
        "allocations (1.0)": f"/resource_providers/{host}/allocations",
        "aggregates (1.19)": f"/resource_providers/{host}/aggregates",
        "traits (1.6)": f"/resource_providers/{host}/traits",
        "sharing providers (1.18)": ("/resource_providers?member_of=in:" + ",".join(aggregates)
                                     + "&required=MISC_SHARES_VIA_AGGREGATE"),
    }


MICROVERSIONS = {"GET /": "1.0", "allocations (1.0)": "1.0", "aggregates (1.19)": "1.19",
                 "traits (1.6)": "1.6", "sharing providers (1.18)": "1.18"}


def open_idle(server: servers.RunningServer, count: int) -> list[socket.socket]:
    """``count`` connections that have asked ``GET /`` once and stay open, idle
    (one never served would be closed after request_timeout)."""
    host, port = server.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    opened = []
    for _ in range(count):
        sock = socket.create_connection((host, int(port)), timeout=30)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
        opened.append(sock)
    for sock in opened:
        answer = b""
        while b"\r\n\r\n" not in answer:
            more = sock.recv(65536)
            if not more:
                raise SystemExit("an idle connection was closed before its answer")
            answer += more
        if not answer.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"GET / on an idle connection: {answer[:80]!r}")
    return opened


def measure(server: servers.RunningServer, kind: str, path: str, calls: int,
            connections: int) -> float:
    """Milliseconds of server CPU per call of one kind."""
    client = PlacementClient(server.url, microversion=MICROVERSIONS[kind])

    def send(count: int) -> None:
        for _ in range(count):
            reply = client.get(path)
            if reply.status != 200:
                raise SystemExit(f"{kind}: {reply.describe()}")
        # Its own only: ``close`` would close the connections other senders
        # are still using (http.client's ResponseNotReady in their getresponse).
        client.close_own()

    with ThreadPoolExecutor(connections) as pool:  # warm every worker and connection
        list(pool.map(send, [20] * connections))
    pids = server_pids(server)
    before = cpu_seconds(pids)
    started = time.monotonic()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(send, [calls // connections] * connections))
    wall = time.monotonic() - started
    spent = cpu_seconds(pids) - before
    sent = calls // connections * connections
    print(f"  {kind:26} {spent * 1000 / sent:6.3f} ms CPU per call  ({sent} calls, "
          f"{sent / wall:,.0f}/s, {spent:.2f} s CPU)", flush=True)
    return spent * 1000 / sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--db", choices=["postgresql", "mysql", "sqlite"], default="postgresql")
    p.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432")
    p.add_argument("--mysql-url", default="mysql://root@127.0.0.1:3306")
    p.add_argument("--impls", default="allotment",
                   help="comma-separated: allotment, baseline (--baseline-bin), upstream "
                        "(openstack-placement under uwsgi)")
    p.add_argument("--allotment-bin", default=str(REPO / ".venv" / "bin" / "allotment"))
    p.add_argument("--baseline-bin", help="an older allotment's CLI, measured as 'baseline'")
    p.add_argument("--upstream-venv", default=str(BENCH / ".upstream-venv"))
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--port", type=int, default=18520)
    p.add_argument("--calls", type=int, default=2000, help="calls of each kind per round")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds; each measures every kind on every server in turn, and the "
                        "median round is reported (the servers run side by side, so noise "
                        "from other work on the machine falls on all of them alike)")
    p.add_argument("--connections", type=int, default=4, help="keep-alive connections")
    p.add_argument("--idle-connections", type=int, default=0,
                   help="connections to each server that asked once and stay open, idle, "
                        "throughout (a large cloud's compute nodes between their polls; "
                        "the servers keep idle connections an hour for it)")
    args = p.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="allotment-percall-"))
    dbs = servers.DatabaseFactory(args.db, workdir, args.pg_url,
                                  str(Path(args.allotment_bin).parent / "python"),
                                  mysql_url=args.mysql_url)
    dbs.check()
    running: dict[str, tuple[servers.RunningServer, dict[str, str]]] = {}
    cleanups: list = []
    try:
        impls = [name.strip() for name in args.impls.split(",") if name.strip()]
        for offset, impl in enumerate(impls):
            if impl == "upstream":
                venv = Path(args.upstream_venv)
                servers.ensure_upstream_venv(venv)
                command = servers.ServerCommand("upstream", str(venv / "bin" / "uwsgi"),
                                                args.workers, args.threads)
            elif impl == "baseline":
                if not args.baseline_bin:
                    raise SystemExit("--impls baseline needs --baseline-bin")
                command = servers.ServerCommand("allotment", args.baseline_bin, args.workers,
                                                args.threads)
            else:
                command = servers.ServerCommand("allotment", args.allotment_bin, args.workers,
                                                args.threads)
            db = dbs.create(f"{impl}_percall")
            cleanups.append(lambda db=db: dbs.destroy(db))
            conf = servers.write_config(workdir / impl, db.url_for(command.name))
            if args.idle_connections:
                with conf.open("a") as extra:
                    extra.write("[allotment]\nkeepalive_timeout = 3600\n")
            server = servers.RunningServer(command, conf, args.port + offset,
                                           workdir / f"{impl}.log")
            cleanups.append(server.stop)
            server.start()
            running[impl] = (server, load_host(PlacementClient(server.url,
                                                               microversion="1.39")))
            idle = open_idle(server, args.idle_connections)
            cleanups.append(lambda idle=idle: [sock.close() for sock in idle])
        samples: dict[str, dict[str, list[float]]] = {
            impl: {kind: [] for kind in MICROVERSIONS} for impl in running}
        for round_number in range(1, args.rounds + 1):
            for kind in MICROVERSIONS:
                for impl, (server, paths) in running.items():
                    print(f"round {round_number}, {impl}:", end="", flush=True)
                    samples[impl][kind].append(
                        measure(server, kind, paths[kind], args.calls, args.connections))
    finally:
        for cleanup in reversed(cleanups):
            cleanup()
    results = {impl: {kind: statistics.median(values) for kind, values in by_kind.items()}
               for impl, by_kind in samples.items()}
    print(f"\n{args.db}, {args.workers} workers x {args.threads} threads, "
          f"{args.connections} keep-alive connections"
          + (f" and {args.idle_connections} idle ones" if args.idle_connections else "")
          + f", median of {args.rounds} rounds of "
          f"{args.calls} calls; load average at end %.1f" % os.getloadavg()[0])
    names = list(results)
    print("\n| call | " + " | ".join(f"{name} ms CPU" for name in names) + " |")
    print("| --- |" + " --- |" * len(names))
    for kind in MICROVERSIONS:
        print(f"| {kind} | " + " | ".join(f"{results[n][kind]:.3f}" for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
