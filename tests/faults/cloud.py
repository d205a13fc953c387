"""What the campaign runs on: a 3-node Galera cluster, each node on its own
loopback address, and one Placement server per node (as deployments pin them).

The servers are allotment's (``allotment serve``, 2 workers) or upstream
Placement 16.0.0's (uwsgi from bench's venv, 2 processes), for the comparison:
``upstream`` on the schema upstream makes (no capacity guard), as an operator
runs it today, or ``upstream-guarded`` on allotment's schema, whose triggers
(the capacity guard, the change log, the history) then watch upstream's writes.
Both are started by bench's ``RunningServer`` (a process group of their own, so
a restart can SIGKILL the master and its workers at once). This module also
holds the node-level faults' mechanics: SIGKILL and restart with the recovered
position (IST), wipe and restart (SST), SIGSTOP / SIGCONT.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clients import mixed, sidebyside
from tests.support.dbservers import free_port
from tests.support.galera import GaleraCluster, GaleraNode

DATABASE = "placement"
KINDS = ("allotment", "upstream", "upstream-guarded")


@dataclass
class Server:
    """One Placement server, pinned to one node."""

    name: str
    running: Any  # bench's RunningServer
    node: GaleraNode

    @property
    def url(self) -> str:
        return str(self.running.url)

    def kill(self) -> None:
        """SIGKILL the whole process group (master and workers): a crash."""
        process = self.running.process
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        deadline = time.monotonic() + 10
        while sidebyside._bench_servers().port_in_use(self.running.port) \
                and time.monotonic() < deadline:
            time.sleep(0.1)

    def start(self) -> None:
        self.running.start(120.0)


@dataclass
class Cloud:
    kind: str  # one of KINDS
    cluster: GaleraCluster
    servers: list[Server] = field(default_factory=list)
    workdir: Path = Path()

    @property
    def addresses(self) -> list[str]:
        return [node.host for node in self.cluster.nodes]

    def stop(self) -> None:
        for server in self.servers:
            with contextlib.suppress(Exception):
                server.running.stop()
        for node in self.cluster.nodes:
            with contextlib.suppress(ProcessLookupError, TypeError):
                if node.process is not None:
                    os.kill(node.process.pid, signal.SIGCONT)
        self.cluster.remove()


# How allotment logs a request it answered 500 for (``http.errors``); oslo.log
# ends that line with the exception's type and first line (the driver's words).
_UNCAUGHT = "Uncaught exception serving "


def server_errors(cloud: Cloud, limit: int = 10) -> list[str]:
    """The requests each server answered 500, with the exception it logged,
    so that a report names the cause (the answer itself does not)."""
    found: list[str] = []
    for server in cloud.servers:
        path = Path(server.running.log_path)
        if not path.exists():
            continue
        with open(path, errors="replace") as log:
            found.extend(f"{server.name}: {line.split(_UNCAUGHT, 1)[1].strip()[:300]}"
                         for line in log if _UNCAUGHT in line)
    return found[:limit]


def missing() -> str | None:
    from tests.faults.netfilter import PacketFilter
    return GaleraCluster.missing() or PacketFilter.missing()


def start(kind: str, workdir: Path) -> Cloud:
    """The cluster and three servers of ``kind``; the schema made once, on node 1."""
    cluster = GaleraCluster.create(own_addresses=True)
    if cluster is None:
        raise RuntimeError(f"no Galera cluster: {GaleraCluster.missing()}")
    cloud = Cloud(kind, cluster, workdir=workdir)
    try:
        cluster.start()
        first = cluster.nodes[0]
        first.create_database(DATABASE)
        url = first.url(DATABASE)
        # allotment's schema (head, with the guard); for upstream back to 0001,
        # the schema upstream itself makes, without the guard's triggers.
        mixed.set_guard(url, True)
        if kind == "upstream":  # upstream-guarded keeps the guard
            mixed.set_guard(url, False)
        bench = sidebyside._bench_servers()
        implementation = "upstream" if kind.startswith("upstream") else "allotment"
        binary = (sidebyside.UPSTREAM_VENV / "bin" / "uwsgi" if implementation == "upstream"
                  else sidebyside.ALLOTMENT_BIN)
        command = bench.ServerCommand(implementation, str(binary), 2, 4)
        for number, node in enumerate(cluster.nodes, start=1):
            directory = workdir / f"{kind}{number}"
            conf = bench.write_config(directory, node.url(DATABASE))
            running = bench.RunningServer(command, conf, free_port(), directory / "server.log")
            server = Server(f"{kind}{number}", running, node)
            cloud.servers.append(server)
            server.start()
    except BaseException:
        cloud.stop()
        raise
    return cloud


# --- node faults ------------------------------------------------------------------

def kill_node(node: GaleraNode) -> None:
    assert node.process is not None
    node.process.send_signal(signal.SIGKILL)
    node.process.wait(timeout=10)


def recovered_position(node: GaleraNode) -> str | None:
    """``mariadbd --wsrep-recover``: the last committed position InnoDB holds
    (what Debian's galera_recovery does before a start), so that the node asks
    for IST instead of a full SST after a crash."""
    log = node.base / "recover.log"
    log.unlink(missing_ok=True)
    command = [*node._command(), "--wsrep-recover", f"--log-error={log}"]
    subprocess.run(command, capture_output=True, timeout=120, **node._popen_user())
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.findall(r"Recovered position: ([0-9a-f-]+:-?\d+)", text)
    return found[-1] if found else None


def restart_node(node: GaleraNode, position: str | None) -> float:
    """Start ``node`` again (at ``position`` if given); seconds until Synced."""
    began = time.monotonic()
    node.start_position = position
    try:
        node.start(180.0)
    finally:
        node.start_position = None
    return time.monotonic() - began


def wipe_node(node: GaleraNode) -> None:
    """Throw the node's data away: it can only come back by a full state transfer."""
    shutil.rmtree(node.data)
    node.install_data_dir()


def pause_node(node: GaleraNode) -> None:
    assert node.process is not None
    node.process.send_signal(signal.SIGSTOP)


def resume_node(node: GaleraNode) -> None:
    assert node.process is not None
    node.process.send_signal(signal.SIGCONT)


def transfer_seen(node: GaleraNode, since: int) -> str:
    """Which state transfer the node's log shows after byte ``since``: SST, IST or none.

    (A node that came back by SST then also receives the writes since by IST, and
    a node that asked for IST still runs the rsync SST script, in bypass mode,
    and logs "SST received": the script's own last line tells which it was.)
    """
    with open(node.log_path, "rb") as log:
        log.seek(since)
        text = log.read().decode(errors="replace")
    if "rsync SST completed on joiner" in text:
        return "SST"
    if "rsync IST completed on joiner" in text or "IST received" in text:
        return "IST"
    return "none"


def log_size(node: GaleraNode) -> int:
    return node.log_path.stat().st_size if node.log_path.exists() else 0


def synced(node: GaleraNode) -> bool:
    try:
        status = node.wsrep_status()
    except Exception:
        return False
    return status.get("wsrep_local_state_comment") == "Synced" and \
        status.get("wsrep_ready") == "ON" and status.get("wsrep_cluster_size") == "3"


def wait_healed(cloud: Cloud, timeout: float = 180.0) -> float:
    """Seconds until every node is Synced in a primary component of 3."""
    began = time.monotonic()
    while not all(synced(node) for node in cloud.cluster.nodes):
        if time.monotonic() - began > timeout:
            states = {n.name: synced(n) for n in cloud.cluster.nodes}
            raise RuntimeError(f"cluster not healed after {timeout:g} s: {states}")
        time.sleep(0.5)
    return time.monotonic() - began
