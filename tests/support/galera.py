"""A private 3-node MariaDB Galera cluster on loopback, for tests/live/test_galera.py.

Each node is a ``tests.support.dbservers.MariaDBServer`` (its own data directory,
socket and SQL port) started with the wsrep provider and three more free
loopback ports of its own: group communication (``gmcast.listen_addr``),
incremental state transfer (``ist.recv_addr``) and full state transfer
(rsync, ``wsrep_sst_receive_address``). Node 1 bootstraps the cluster
(``--wsrep-new-cluster``, its first start only); the others join it by SST
and, when stopped and started again, catch up by IST from the others' gcache.

A node counts as started when it is ``Synced`` and ``wsrep_ready``: only then
does it run statements (before, it answers 1047 "WSREP has not yet prepared
node for application use").

``GaleraCluster.missing()`` says what is not installed (Debian: galera-4,
mariadb-server, rsync); ``.ci/run`` installs them.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import tempfile
import time
import urllib.request
from pathlib import Path

import pymysql

from tests.support.dbservers import MARIADB_INSTALL_DB, MARIADBD, MariaDBServer, _missing, free_port

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
RSYNC = Path("/usr/bin/rsync")
SST_RSYNC = Path("/usr/bin/wsrep_sst_rsync")


class GaleraNode(MariaDBServer):
    """A MariaDB server with wsrep on; as root it runs as ``mysql``, not root.

    (The rsync SST script starts an rsync daemon on the joiner, which as root
    switches to ``nobody`` and then cannot write the joiner's data directory.)
    """

    backend = "mysql (galera)"

    cluster_address: str
    bootstrap: bool
    name: str

    @staticmethod
    def _user() -> str:
        return "mysql" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    @classmethod
    def create_node(cls, name: str, host: str = "127.0.0.1") -> GaleraNode:
        node = cls(Path(tempfile.mkdtemp(prefix="allotment-galera-node-")))
        node.host = host
        node.data = node.base / "data"
        node.socket_path = node.base / "mariadb.sock"
        user = pwd.getpwnam(node._user())
        os.chown(node.base, user.pw_uid, user.pw_gid)
        node.install_data_dir()
        node.setup(name)
        return node

    def setup(self, name: str) -> None:
        self.name = name
        self.gcomm_port = free_port()
        self.ist_port = free_port()
        self.sst_port = free_port()
        self.bootstrap = False
        # After a crash: the position ``--wsrep-recover`` found, so the node asks for IST.
        self.start_position: str | None = None

    def _command(self) -> list[str]:
        options = "; ".join([
            f"gmcast.listen_addr=tcp://{self.host}:{self.gcomm_port}",
            f"ist.recv_addr={self.host}:{self.ist_port}",
            "gcache.size=64M",
            # A node that left without saying so is given up on quickly.
            "evs.suspect_timeout=PT3S", "evs.inactive_timeout=PT6S",
            "evs.install_timeout=PT6S",
        ])
        command = [
            *super()._command(),
            "--wsrep-on=ON", f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address={self.cluster_address}",
            "--wsrep-cluster-name=allotment-test", f"--wsrep-node-name={self.name}",
            f"--wsrep-node-address={self.host}:{self.gcomm_port}",
            f"--wsrep-provider-options={options}",
            "--wsrep-sst-method=rsync",
            f"--wsrep-sst-receive-address={self.host}:{self.sst_port}",
            # Causal reads, as the deploy page's production layout advises: with the default 0
            # a read through another node right after a write was seen stale.
            "--wsrep-sync-wait=1",
            "--wsrep-slave-threads=2", "--binlog-format=ROW",
            "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
        ]
        if self.bootstrap:
            command.append("--wsrep-new-cluster")
        if self.start_position:
            command.append(f"--wsrep-start-position={self.start_position}")
        return command

    def start(self, timeout: float = 60.0) -> float:
        """As ``MariaDBServer.start``, once more when Galera's group connection
        failed at its very start (seen once in about 20 cluster starts: "Failed
        to read thread schedparams", the node aborting at once)."""
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        try:
            return super().start(timeout)
        except RuntimeError:
            with open(self.log_path, "rb") as log:
                log.seek(logged)
                this_start = log.read().decode(errors="replace")
            if "Failed to read thread schedparams" not in this_start:
                raise
            return super().start(timeout)

    def _connect(self) -> None:
        conn = pymysql.connect(host=self.host, port=self.port, user="root", password="",
                               connect_timeout=2, read_timeout=2)
        try:
            status = self.status(conn)
        finally:
            conn.close()
        if status.get("wsrep_ready") != "ON" or \
                status.get("wsrep_local_state_comment") != "Synced":
            raise RuntimeError(f"{self.name} not synced: {status}")

    @staticmethod
    def status(conn: pymysql.connections.Connection) -> dict[str, str]:
        with conn.cursor() as cursor:
            cursor.execute("SHOW STATUS LIKE 'wsrep%%'")
            return {name: value for name, value in cursor.fetchall()}

    def wsrep_status(self) -> dict[str, str]:
        conn = pymysql.connect(host=self.host, port=self.port, user="root", password="",
                               connect_timeout=2, read_timeout=5)
        try:
            return self.status(conn)
        finally:
            conn.close()


class GaleraCluster:
    """Three nodes; ``start()`` bootstraps node 1 and joins the others."""

    def __init__(self, nodes: list[GaleraNode], base: Path) -> None:
        self.nodes = nodes
        self.base = base

    @staticmethod
    def missing() -> str | None:
        return _missing([MARIADBD, MARIADB_INSTALL_DB, PROVIDER, RSYNC, SST_RSYNC])

    @classmethod
    def create(cls, size: int = 3, own_addresses: bool = False) -> GaleraCluster | None:
        """``own_addresses``: node N listens on 127.0.0.(10+N) (SQL, group communication,
        IST, SST), so that packet filter rules between those addresses cut links between
        nodes; otherwise every node is on 127.0.0.1."""
        if cls.missing():
            return None
        base = Path(tempfile.mkdtemp(prefix="allotment-galera-"))
        nodes: list[GaleraNode] = []
        try:
            for number in range(1, size + 1):
                # One at a time: the clean-up below removes those already made.
                host = f"127.0.0.{10 + number}" if own_addresses else "127.0.0.1"
                nodes.append(GaleraNode.create_node(f"node{number}", host))
        except BaseException:
            for node in nodes:
                node.remove()
            shutil.rmtree(base, ignore_errors=True)
            raise
        address = "gcomm://" + ",".join(f"{n.host}:{n.gcomm_port}" for n in nodes)
        for node in nodes:
            node.cluster_address = address
        return cls(nodes, base)

    def start(self, timeout: float = 90.0) -> float:
        """Bootstrap node 1, join the others one by one; return the seconds it took."""
        began = time.monotonic()
        first = self.nodes[0]
        first.bootstrap = True
        first.start(timeout)
        first.bootstrap = False  # a restart of node 1 rejoins, never bootstraps again
        for node in self.nodes[1:]:
            node.start(timeout)
        size = self.nodes[0].wsrep_status().get("wsrep_cluster_size")
        if size != str(len(self.nodes)):
            raise RuntimeError(f"cluster size {size}, expected {len(self.nodes)}")
        return time.monotonic() - began

    def remove(self) -> None:
        for node in reversed(self.nodes):
            node.remove()
        shutil.rmtree(self.base, ignore_errors=True)


def write_retries(url: str) -> dict[str, float]:
    """A server's ``placement_write_retries`` counters by cause, from its /metrics."""
    # /metrics on the API port is an admin's read (noauth2 token ``admin``).
    request = urllib.request.Request(url + "/metrics", headers={"X-Auth-Token": "admin"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'placement_write_retries_total\{cause="(\w+)"\} ([0-9.e+]+)', line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found
