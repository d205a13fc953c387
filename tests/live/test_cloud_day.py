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

import datetime
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from allotment.candidates import model as read_model
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
    # Each worker's read model, from its log: loaded at its first candidates request
    # (which of the two workers' connections the boots came in on is the kernel's choice).
    models = cd.model_costs(running.log_path, result.window_span)
    assert models and all(m.providers >= 20 and m.load_ms > 0 for m in models), models
    assert all(m.resident_mib is not None for m in models), models

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


def test_the_read_models_upkeep_is_read_from_the_workers_lines(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The lines the model writes (its own words, in allotment's log format),
    those of the window summed per worker."""
    cd = _cloud_day()
    caplog.set_level(logging.INFO, logger="allotment.candidates.model")
    read_model._report_upkeep(read_model.Upkeep(polls=900, changes=120, cpu=0.6), 60.0, 20000)
    read_model._report_upkeep(read_model.Upkeep(polls=800, changes=60, checks=1, cpu=3.0),
                              60.0, 20000)
    first, second = (record.getMessage() for record in caplog.records)
    start = datetime.datetime(2026, 12, 7, 20, 0, 0)

    def line(seconds: float, pid: int, message: str) -> str:
        at = (start + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S.%f")
        return f"{at[:-3]} {pid} INFO allotment.candidates.model [-] {message}"

    log = tmp_path / "allotment.log"
    log.write_text("\n".join([
        line(1, 41, "Read model loaded (first request): 20000 providers in 2100 ms "
                    "(1900 ms of CPU), resident memory +148 MiB"),
        line(2, 42, "Read model loaded (first request): 20000 providers in 2300 ms "
                    "(2000 ms of CPU)"),
        line(50, 41, first),  # before the window
        line(110, 41, first), line(170, 41, second), line(171, 42, first),
        line(300, 42, second),  # after it
    ]) + "\n")
    window = ((start + datetime.timedelta(seconds=100)).timestamp(),
              (start + datetime.timedelta(seconds=200)).timestamp())
    one, two = cd.model_costs(log, window)
    assert (one.pid, one.providers, one.load_ms, one.load_cpu_ms, one.resident_mib) == \
        (41, 20000, 2100, 1900, 148)
    assert (one.changes, one.upkeep_cpu_ms, one.upkeep_seconds) == (180, 3600, 120)
    assert one.upkeep_share == pytest.approx(0.03)
    assert (two.pid, two.resident_mib, two.changes, two.upkeep_seconds) == (42, None, 120, 60)
    table = cd.render_models([(20000, one), (20000, two)])
    assert "| 20,000 | 41 | 20,000 | 2100 ms (1900 ms) | +148 MiB | 3.00 % | 1.5 |" in table
