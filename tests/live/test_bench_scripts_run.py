"""The bench scripts no other test runs, run end to end at a tiny size.

A bench is read rarely and trusted when it is: ``bench/history_cost.py`` had
stopped working for days (every write of its second variant answered 500)
before anyone ran it. Each script here runs as an operator would run it, on
the databases it measures, small enough to take seconds; the test holds that
it finishes and prints its table, not what the figures are. (``galera.py``
needs a cluster and ``dashboard_paint.py`` a browser: their own tests are
tests/live/test_galera.py and tests/live/test_dashboard_browser.py.)
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import conftest
from tests.support.bench import BENCH

SERVER_BACKENDS = [backend for backend in conftest._backends() if backend != "sqlite"]


def _run(script: str, *args: str) -> str:
    # Its own process, as the README runs it: the scripts put bench/ and the
    # repository on the path themselves.
    done = subprocess.run([sys.executable, str(BENCH / script), *args], capture_output=True,
                          text=True, timeout=300, cwd=BENCH.parent)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return done.stdout


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
def test_guard_bench_runs(backend: str) -> None:
    out = _run("guard.py", "--db", backend, "--consumers", "20", "--providers", "2")
    [row] = [line for line in out.splitlines() if line.startswith("| 2 |")]
    assert row.count("|") == 5, out


@pytest.mark.parametrize("backend", SERVER_BACKENDS)
def test_history_growth_bench_runs(backend: str) -> None:
    out = _run("history_growth.py", "--db", backend, "--entries", "200", "--requests", "3")
    assert "PUT /allocations/{c}: aged" in out and "PUT .../inventories: aged" in out, out


def test_metrics_scrape_bench_runs() -> None:
    args = ["--providers", "10", "--scrapes", "1"]
    if "postgresql" in SERVER_BACKENDS:
        args += ["--postgresql-url", conftest.SERVER_URLS["postgresql"]]
    out = _run("metrics_scrape.py", *args)
    rows = [line for line in out.splitlines() if line.startswith("| ") and "| 10 |" in line]
    assert len(rows) == (2 if "postgresql" in SERVER_BACKENDS else 1), out
