"""A live ``allotment serve`` on loopback, for tests that drive real clients.

Each server gets a fresh SQLite database and a free port; it is stopped with
SIGTERM (and killed if it does not stop) when the test session ends.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ALLOTMENT = [sys.executable, "-m", "allotment.cli"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveServer:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start(workdir: Path, database_url: str | None = None, workers: int = 2,
          threads: int = 4, ready_timeout: float = 60.0, extra_conf: str = "",
          extra_args: list[str] | None = None, port: int | None = None,
          open_files: int | None = None) -> LiveServer:
    """``allotment serve`` (noauth2: token ``admin`` is an admin) on a free loopback port.

    ``extra_conf`` is appended to the generated placement.conf (whole sections,
    e.g. ``"[allotment]\nmetrics = True\n"``); ``extra_args`` to the command line.
    ``open_files`` sets the server's RLIMIT_NOFILE (soft and hard), to run it short.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    url = database_url or f"sqlite:///{workdir}/placement.sqlite"
    conf = workdir / "placement.conf"
    conf.write_text(f"[placement_database]\nconnection = {url}\nsync_on_startup = True\n"
                    "[api]\nauth_strategy = noauth2\n" + extra_conf)
    log_path = workdir / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}

    def limit_open_files() -> None:
        if open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            ALLOTMENT + ["serve", "--config-file", str(conf), "--host", "127.0.0.1",
                         "--port", str(port), "--workers", str(workers),
                         "--threads", str(threads)] + (extra_args or []),
            stdout=log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=limit_open_files if open_files is not None else None)
    server = LiveServer(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + ready_timeout
    while not _answers(server.url + "/"):
        if process.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError("allotment serve did not start:\n"
                               + log_path.read_text(errors="replace"))
        time.sleep(0.2)
    return server


def _answers(url: str) -> bool:
    """Whether ``url`` answers (a connection refused or an error status: not yet)."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False
