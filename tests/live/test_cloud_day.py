"""bench/cloud_day.py's generator and report against a live allotment serve, small.

A cloud of 20 hosts (the SR-IOV variant: child trees and sharing pools) gets a few
seconds of its day at many times nova's rates, so that every kind of call and
action is sent: every periodic kind and every action is answered without an error,
the report renders it, and what the generator believes the cloud holds is what the
server says it holds. Then a schedule no generator could keep (a third of a million
calls due within a millisecond) is reported INVALID,
not as a result. On PostgreSQL and MariaDB, allotment only (upstream's day is the
benchmark's business).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests import conftest
from tests.clients import live
from tests.support.bench import bench_module

BACKENDS = [backend for backend in conftest._backends() if backend != "sqlite"]


def _cloud_day() -> ModuleType:
    return bench_module("cloud_day")


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str,
                                                                             live.LiveServer]]:
    url = conftest._create_server_database(request.param)
    try:
        started = live.start(tmp_path, database_url=url, workers=2, threads=4)
        try:
            yield request.param, url, started
        finally:
            started.stop()
    finally:
        conftest._drop_server_database(request.param, url)


def _project_usages(base: str, project: str) -> dict[str, int]:
    bench_client = bench_module("http_client")
    client = bench_client.PlacementClient(base, microversion="1.9")
    reply = client.get(f"/usages?project_id={project}")
    client.close()
    assert reply.status == 200, reply.describe()
    usages: dict[str, int] = reply.json()["usages"]
    return usages


def test_a_small_cloud_day_is_sent_answered_and_reported(
        server: tuple[str, str, live.LiveServer]) -> None:
    cd = _cloud_day()
    backend, url, running = server
    kind = "postgresql" if backend == "postgresql" else "mysql"
    name = url.rsplit("/", 1)[1].split("?")[0]
    cloud = cd.Cloud(20, sriov=True)
    seconds, requests = cd.load_cloud(running.url, cloud, concurrency=4)
    assert seconds > 0 and requests > 20

    # 60x nova's periodic rates (32 calls/s), actions 10x more (2.4 boots/s).
    settings = cd.DaySettings(warmup=1.0, window=6.0, rates=cd.Rates(scale=60, actions=10),
                              senders=8, timeout=20.0, probe_requests=20, limit=20.0)
    result = cd.run_day(running.url, cloud, settings, "allotment", running.process.pid,
                        kind, name)
    report: dict[str, Any] = result.as_dict(settings)
    text = json.dumps(report)
    assert result.invalid(settings) == "", text
    assert result.errors == 0, text
    for each in (*cd.PERIODIC_KINDS, *cd.ACTION_KINDS):
        assert result.tally.kind(each).latencies, (each, text)
    # Every scheduled event of the window was answered, each once.
    for each in cd.PERIODIC_KINDS:
        assert len(result.tally.kind(each).latencies) == result.tally.scheduled[each], text
    assert report["carried"] is True and report["verdict"] == "carried", text
    assert result.server_cpu > 0 and result.generator_cpu > 0, text
    assert result.database_cpu >= 0 and result.rss, text
    assert set(result.cpu_per_call) == {*cd.PERIODIC_KINDS, "candidates"}, text
    table = cd.render([result], settings)
    assert "| 20 (" in table and "allotment" in table and "carried" in table, table
    assert "- allotment: largest N carried: 20" in cd.largest_carried([result], settings)

    # Boots, moves and deletes did on the server what the generator recorded.
    held = result.instances.held()
    memory = sum(flavor.memory_mb for _, flavor in held.values())
    vcpus = sum(flavor.vcpus for _, flavor in held.values())
    usages = _project_usages(running.url, bench_module("nova_cloud").PROJECT)
    assert (usages["MEMORY_MB"], usages["VCPU"]) == (memory, vcpus), text

    # A schedule no dispatcher can hand out in time (about 320,000 calls due within one
    # millisecond; it hands out about 2 million a second): INVALID, not a result.
    overloaded = cd.DaySettings(warmup=0.0, window=0.001, rates=cd.Rates(scale=6e8, actions=0),
                                senders=4, timeout=2.0, probe_requests=0, limit=20.0)
    flood = cd.run_day(running.url, cloud, overloaded, "allotment", running.process.pid,
                       kind, name)
    carried, why = flood.verdict(overloaded)
    assert not carried and why.startswith("INVALID: the generator fell behind"), why
    assert "**INVALID" in cd.render([flood], overloaded)
    assert "Traceback" not in running.log_path.read_text(errors="replace")
