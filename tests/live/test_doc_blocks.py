"""The shell blocks of the manual's install, quick-start and deployment pages run
as shown.

A page marks a block with a MyST comment line ``% doc-test: <name>`` right
before its ```console or ```shell fence. Each ``$`` line of the block runs in
bash, in order, on one machine: a private loopback address (127.0.0.x, a free
port) instead of 8778, a temporary directory instead of /tmp and
/etc/placement (a placement.conf with a SQLite database there, noauth2), this
venv instead of ``.venv``. A command that serves (``serve``) is started and
kept running until the page's blocks are done, once it answers ``GET /``;
every other command must exit 0. The deployment tools' own files are the
snippets tests/live/test_deployment_tools.py runs.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from tests.support.dbservers import free_port

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "doc" / "source"
PAGES = ["install/index.md", "install/quickstart.md", "deploy/index.md",
         "deploy/kolla-ansible.md", "deploy/openstack-helm.md",
         "deploy/openstack-ansible.md", "deploy/devstack.md", "deploy/systemd.md"]
BIN = Path(sys.executable).parent
MARK = re.compile(r"^% doc-test: (?P<name>[\w-]+)\n```(?:console|shell)\n(?P<body>.*?)^```",
                  re.M | re.S)


def blocks(page: str) -> list[tuple[str, list[str]]]:
    """The marked blocks of ``page``: name and commands."""
    text = (DOCS / page).read_text()
    return [(m["name"], [line[2:] for line in m["body"].splitlines() if line.startswith("$ ")])
            for m in MARK.finditer(text)]


def test_pages_mark_their_blocks() -> None:
    """Every console block of the install and quick-start pages is marked, or
    is `make test` (the whole suite) alone."""
    for page in ("install/index.md", "install/quickstart.md"):
        text = (DOCS / page).read_text()
        fences = re.findall(r"^([^\n]*)\n```console\n(.*?)^```", text, re.M | re.S)
        for before, body in fences:
            assert before.startswith("% doc-test: ") or body.startswith("$ make test"), \
                (page, body)


class Site:
    """What the commands of one page share: the address, the files, the servers."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.host = f"127.0.0.{random.randint(2, 250)}"
        self.port = free_port()
        self.conf = tmp / "etc" / "placement.conf"
        self.conf.parent.mkdir()
        self.conf.write_text(f"[placement_database]\nconnection = sqlite:///{tmp}/conf.sqlite\n"
                             "[api]\nauth_strategy = noauth2\n")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        # `allotment serve` with no options keeps its data in the user's data directory.
        self.env.update(HOME=str(tmp), XDG_DATA_HOME=str(tmp / "data"))
        # The commands as installed: allotment, placement-manage, placement-status.
        self.env["PATH"] = f"{BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.servers: list[subprocess.Popen[bytes]] = []
        self.logs: list[BinaryIO] = []

    def rewrite(self, command: str) -> str:
        address = f"{self.host}:{self.port}"
        changes = {
            "make serve": f"make -C {ROOT} serve VENV={BIN.parent} "
                          f"SERVE_HOST={self.host} SERVE_PORT={self.port}",
            ".venv/bin/": f"{BIN}/",
            "/etc/placement/placement.conf": str(self.conf),
            "/tmp/": f"{self.tmp}/",
            "127.0.0.1:8778": address,
            "--host 0.0.0.0": f"--host {self.host}",
            "--host 127.0.0.1": f"--host {self.host}",
            "--port 8778": f"--port {self.port}",
        }
        # One pass: a replacement (the temporary directory is under /tmp) is not
        # replaced again.
        pattern = "|".join(re.escape(old) for old in changes)
        return re.sub(pattern, lambda m: changes[m[0]], command)

    def run(self, command: str) -> str:
        command = self.rewrite(command)
        if re.search(r"\bserve\b", command):
            self.serve(command)
            return ""
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                              env=self.env, cwd=self.tmp, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def serve(self, command: str) -> None:
        log = open(self.tmp / f"server-{len(self.servers)}.log", "wb")  # noqa: SIM115
        self.logs.append(log)
        server = subprocess.Popen(["bash", "-c", f"exec {command}"], stdout=log,
                                  stderr=subprocess.STDOUT, env=self.env, cwd=self.tmp,
                                  start_new_session=True)
        self.servers.append(server)
        url = f"http://{self.host}:{self.port}/"
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return
            if server.poll() is not None or time.monotonic() > deadline:
                log.flush()
                shown = (self.tmp / f"server-{len(self.servers) - 1}.log").read_text()
                pytest.fail(f"{command} did not answer {url}:\n{shown}", pytrace=False)
            time.sleep(0.3)

    def close(self) -> None:
        for server in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                server.wait(timeout=10)
        for log in self.logs:
            log.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    running = Site(tmp_path)
    try:
        yield running
    finally:
        running.close()


MARKED = [(page, name, commands) for page in PAGES for name, commands in blocks(page)]


def test_marked_blocks_exist() -> None:
    assert {name for _, name, _ in MARKED} >= {"run-for-real", "make-serve", "first-calls",
                                              "sqlite-file", "upstream-commands"}


@pytest.mark.parametrize("page", sorted({page for page, _, _ in MARKED}))
def test_page_blocks_run(page: str, site: Site) -> None:
    """The page's marked blocks, in order, sharing one address and directory:
    a server one block starts answers the next block's calls."""
    for name, commands in blocks(page):
        assert commands, f"{page}: block {name} has no $ lines"
        for command in commands:
            if site.servers and re.search(r"\bserve\b", site.rewrite(command)):
                site.close()  # one server at a time on the page's address
                site.servers.clear()
            out = site.run(command)
            if command.startswith("curl "):  # the API answered, in JSON
                assert out.startswith("{"), (command, out)
            if re.search(r"curl .*:8778/'?$", command):  # the root: the version document
                assert '"versions"' in out, (command, out)
