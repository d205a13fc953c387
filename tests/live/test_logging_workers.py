"""The request log of a live server's forked workers, in the log_file of placement.conf
(the rest of the logging tests, in-process: tests/test_logging.py).
"""

from __future__ import annotations

import urllib.request

from tests.clients import live
from tests.test_logging import _request_lines


def test_log_file_receives_the_workers_request_lines(tmp_path):
    log_file = tmp_path / "placement.log"
    server = live.start(tmp_path / "server",
                        extra_conf=f"[DEFAULT]\nlog_file = {log_file}\n")
    try:
        for _ in range(6):
            req = urllib.request.Request(server.url + "/resource_providers",
                                         headers={"X-Auth-Token": "admin"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert resp.status == 200
    finally:
        server.stop()
    lines = [line for line in _request_lines(log_file.read_text())
             if line["uri"] == "/resource_providers"]
    assert len(lines) == 6
    assert {line["user"] for line in lines} == {"admin"}
    assert {line["remote"] for line in lines} == {"127.0.0.1"}
    # Written by the forked workers, not the master.
    assert str(server.process.pid) not in {line["pid"] for line in lines}
