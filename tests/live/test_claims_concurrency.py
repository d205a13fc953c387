"""Claims under real concurrency: a multi-worker server, writers in threads and processes.

For each database a real ``allotment serve --workers 2`` runs as a
subprocess; writers hit it over HTTP at the same time. Afterwards no
provider may be above capacity, the server's usage must equal what the
writers were told they hold, every refusal must be a documented 409 and
nothing may be a 500.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests import conftest
from tests.support import claim_writers
from tests.support.claim_writers import call

# name -> (VCPU total, reserved, allocation_ratio, MEMORY_MB total)
PROVIDERS = {
    "stress-a": (16, 0, 1.0, 4096),
    "stress-b": (20, 4, 1.0, 4096),
    "stress-c": (8, 2, 1.5, 2048),
}
THREAD_WRITERS = 4
PROCESSES = 2
WRITERS_PER_PROCESS = 3
STEPS = 20


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LiveServer:
    def __init__(self, backend: str, base: str) -> None:
        self.backend = backend
        self.base = base
        self.session = requests.Session()

    def call(self, method: str, path: str, body: object = None, version: str = "1.28"):
        return call(self.session, self.base, method, path, body, version)


@pytest.fixture(scope="module", params=conftest._backends())
def live(request, backend_databases, tmp_path_factory):
    """``allotment serve`` with 2 workers on the session database of each backend."""
    database = backend_databases(request.param)
    database.reset()
    tmp = tmp_path_factory.mktemp(f"live-{database.backend}")
    conf = tmp / "placement.conf"
    conf.write_text(f"[placement_database]\nconnection = {database.url}\n"
                    "[api]\nauth_strategy = noauth2\n")
    port = _free_port()
    with open(tmp / "server.log", "w+") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "allotment.cli", "serve", "--config-file", str(conf),
             "--host", "127.0.0.1", "--port", str(port), "--workers", "2", "--threads", "4"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        server = LiveServer(database.backend, f"http://127.0.0.1:{port}")
        try:
            deadline = time.time() + 60
            while True:
                try:
                    if requests.get(server.base + "/", timeout=2).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                if time.time() > deadline or proc.poll() is not None:
                    log.seek(0)
                    pytest.fail(f"server did not start: {log.read()}")
                time.sleep(0.1)
            yield server
        finally:
            server.session.close()
            # Quick shutdown: idle keep-alive connections need not be waited for.
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.seek(0)
            server_log = log.read()
    # Any 500 is logged by the server as an uncaught exception.
    assert "Uncaught exception" not in server_log, server_log


def _make_provider(live: LiveServer, name: str, inventories: dict) -> str:
    status, body = live.call("POST", "/resource_providers", {"name": name}, "1.20")
    assert status == 200, body
    rp_uuid = body["uuid"]
    status, body = live.call("PUT", f"/resource_providers/{rp_uuid}/inventories",
                             {"resource_provider_generation": body["generation"],
                              "inventories": inventories})
    assert status == 200, body
    return rp_uuid


def test_many_writers_never_overcommit(live):
    capacities = {}
    uuids = []
    for name, (vcpu, reserved, ratio, memory) in PROVIDERS.items():
        rp_uuid = _make_provider(live, f"{name}-{live.backend}", {
            "VCPU": {"total": vcpu, "reserved": reserved, "allocation_ratio": ratio},
            "MEMORY_MB": {"total": memory},
        })
        uuids.append(rp_uuid)
        capacities[rp_uuid] = {"VCPU": (vcpu - reserved) * ratio, "MEMORY_MB": memory}
    project = str(uuid.uuid4())

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=claim_writers.process_main,
                         args=(queue, live.base, uuids,
                               [1000 * (p + 1) + w for w in range(WRITERS_PER_PROCESS)],
                               STEPS, project))
             for p in range(PROCESSES)]
    started = time.time()
    for proc in procs:
        proc.start()
    results = claim_writers.run_threads(live.base, uuids, list(range(THREAD_WRITERS)),
                                        STEPS, project)
    for _ in procs:
        results += queue.get(timeout=300)
    for proc in procs:
        proc.join(timeout=60)
    elapsed = time.time() - started

    counts: Counter = Counter()
    expected: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    holders: dict[str, set[str]] = defaultdict(set)
    failures = []
    for result in results:
        counts.update(result["counts"])
        failures += result["failures"]
        for consumer, allocations in result["held"].items():
            for rp_uuid, entry in allocations.items():
                holders[rp_uuid].add(consumer)
                for rc, amount in entry["resources"].items():
                    expected[rp_uuid][rc] += amount
    assert not failures, failures[:5]
    writes = sum(n for key, n in counts.items() if not key.startswith("release"))
    assert writes == (THREAD_WRITERS + PROCESSES * WRITERS_PER_PROCESS) * STEPS \
        - counts["release_ok"]
    # The boundary was really contended: some claims fit, some did not.
    assert counts["claim_ok"] > 0 and counts["claim_refused"] + counts["move_refused"] > 0

    for rp_uuid in uuids:
        status, body = live.call("GET", f"/resource_providers/{rp_uuid}/usages")
        assert status == 200
        usages = body["usages"]
        for rc, capacity in capacities[rp_uuid].items():
            assert usages[rc] <= capacity, (rp_uuid, rc, usages[rc], capacity)
            assert usages[rc] == expected[rp_uuid][rc], (rp_uuid, rc)
        status, body = live.call("GET", f"/resource_providers/{rp_uuid}/allocations")
        assert set(body["allocations"]) == holders[rp_uuid]
    print(f"\n[{live.backend}] {elapsed:.1f}s {dict(sorted(counts.items()))}")


def _race(live: LiveServer, consumer: str, bodies: list[dict],
          in_processes: int = 2) -> list[tuple[int, str, str]]:
    """Fire one PUT per body at the same moment, some from other processes."""
    start_at = time.time() + 1.5
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=claim_writers.contend_process_main,
                         args=(queue, live.base, consumer, body, start_at))
             for body in bodies[:in_processes]]
    for proc in procs:
        proc.start()
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: claim_writers.contend(live.base, consumer, b,
                                                                 start_at),
                                bodies[in_processes:]))
    answers += [queue.get(timeout=120) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    return answers


def test_same_consumer_generation_exactly_one_wins(live):
    rp_uuid = _make_provider(live, f"gen-race-{live.backend}", {"VCPU": {"total": 100}})
    consumer = str(uuid.uuid4())

    def body(amount: int, generation: int | None) -> dict:
        return {"allocations": {rp_uuid: {"resources": {"VCPU": amount}}},
                "project_id": "p", "user_id": "u", "consumer_generation": generation}

    generation = None
    for _round in range(2):
        answers = _race(live, consumer, [body(n, generation) for n in range(1, 7)])
        winners = [a for a in answers if a[0] == 204]
        assert len(winners) == 1, answers
        for status, code, detail in answers:
            if status != 204:
                assert status == 409 and code == "placement.concurrent_update", answers
                assert "consumer generation conflict" in detail
        status, shown = live.call("GET", f"/allocations/{consumer}")
        expected_generation = 1 if generation is None else generation + 1
        assert shown["consumer_generation"] == expected_generation
        generation = expected_generation
    status, usages = live.call("GET", f"/resource_providers/{rp_uuid}/usages")
    assert usages["usages"]["VCPU"] == shown["allocations"][rp_uuid]["resources"]["VCPU"]
