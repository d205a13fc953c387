"""Prometheus metrics from live servers: one coherent scrape across two worker
processes, and a separate metrics listener (in-process: tests/test_metrics.py).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.clients import live
from tests.test_metrics import parse, value


def _get(url: str, token: str | None = "admin") -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"X-Auth-Token": token} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _requests_total(text: str, routes: Iterable[str] = ("/resource_providers",)) -> float:
    samples = parse(text)
    return sum(value(samples, "placement_http_requests_total", route=route) for route in routes)


def test_one_scrape_across_workers(tmp_path: Path):
    server = live.start(tmp_path, extra_conf="[allotment]\nmetrics = True\n", workers=2)
    try:
        # Concurrent clients, so that both workers answer some of the requests.
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: _get(server.url + "/resource_providers")[0],
                                     range(50)))
        assert statuses == [200] * 50
        for _ in range(5):  # whichever worker answers, its scrape counts them all
            status, text = _get(server.url + "/metrics")
            assert status == 200
            assert _requests_total(text) >= 50
        # On the API's address, only for a token the policy allows (admin).
        assert _get(server.url + "/metrics", token=None)[0] == 401
    finally:
        server.stop()


def test_separate_listener_live(tmp_path: Path):
    port = live.free_port()
    server = live.start(tmp_path, workers=2, extra_conf=(
        f"[allotment]\nmetrics = True\nmetrics_listen = {port}\n"))  # loopback
    try:
        metrics_url = f"http://127.0.0.1:{port}"
        for _ in range(5):
            assert _get(server.url + "/resource_providers")[0] == 200
        status, text = _get(metrics_url + "/metrics", token=None)
        assert status == 200 and _requests_total(text) >= 5
        assert _get(metrics_url + "/resource_providers")[0] == 404
        # Not on the API's address at all then, token or not.
        assert _get(server.url + "/metrics", token=None)[0] == 404
        assert _get(server.url + "/metrics")[0] == 404
    finally:
        server.stop()
