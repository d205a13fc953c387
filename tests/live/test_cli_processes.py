"""The ``allotment`` command in processes of its own: ``serve`` with two workers
stopped by SIGTERM, ``db upgrade`` in several processes at once, and the
database commands' imports in a fresh interpreter (in-process: tests/test_cli.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import os_resource_classes as orc
import os_traits
import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.db.engine import create_engine
from tests import conftest
from tests.test_cli import _write_conf

ALLOTMENT = [sys.executable, "-m", "allotment.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# What only ``allotment serve`` and ``allotment.wsgi:application`` need.
# The policy enforcer, not the option list the status check reads (oslo_policy.opts).
WEB_STACK: tuple[str, ...] = ("falcon", "keystonemiddleware", "oslo_policy.policy",
                             "allotment.wsgi")

_DB_COMMANDS_SCRIPT = """
import json, sys
from allotment import cli
url = sys.argv[1]
codes = [cli.main(["db", "upgrade", "--database-url", url]),
         cli.main(["db", "version", "--database-url", url]),
         cli.main(["status", "upgrade", "check", "--database-url", url])]
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def test_database_commands_do_not_load_the_web_stack(tmp_path: Path) -> None:
    """``allotment db`` and ``allotment status`` import the database layer only.

    A fresh interpreter, since this test process has the web stack loaded.
    """
    out = subprocess.run([sys.executable, "-c", _DB_COMMANDS_SCRIPT,
                          f"sqlite:///{tmp_path}/light.db"],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["codes"] == [0, 0, 0]
    loaded = [name for name in result["modules"]
              if any(name == top or name.startswith(top + ".") for top in WEB_STACK)]
    assert loaded == []


def test_serve_with_operator_config_and_sigterm(tmp_path):
    port = _free_port()
    conf_file = _write_conf(tmp_path / "placement.conf", f"sqlite:///{tmp_path}/serve.db")
    proc = subprocess.Popen([*ALLOTMENT, "serve", "--config-file", conf_file, "--host",
                             "127.0.0.1", "--port", str(port), "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    assert resp.status == 200
                    break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    pytest.fail("server did not start")
                time.sleep(0.2)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/resource_providers",
                                     headers={"X-Auth-Token": "admin"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert f"http://127.0.0.1:{port}" in output and "serve.db" in output


@pytest.mark.parametrize("backend", conftest._backends())
def test_sync_in_several_processes_at_once(backend, tmp_path):
    """Workers starting together on a fresh database must not trip over each other."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        url = conftest._create_server_database(backend)
    try:
        procs = [subprocess.Popen([*ALLOTMENT, "db", "upgrade", "--database-url", url],
                                  env=dict(os.environ), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
                 for _ in range(4)]
        for proc in procs:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0, out
        engine = create_engine(url)
        with engine.connect() as conn:
            classes = conn.execute(sa.select(sa.func.count()).select_from(
                t.resource_classes)).scalar()
            traits = conn.execute(sa.select(sa.func.count()).select_from(t.traits)).scalar()
        engine.dispose()
        assert classes == len(orc.STANDARDS)
        assert traits == len(os_traits.get_traits())
    finally:
        if backend != "sqlite":
            conftest._drop_server_database(backend, url)
