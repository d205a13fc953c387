"""Writers for the claim concurrency tests: they claim, move and release over real HTTP.

They run as threads of the test process and inside separate processes
(``process_main``), so this module imports nothing heavy. Each writer owns
its consumers, so it knows exactly what each should hold afterwards: a 204
changes that, any refusal must leave it as it was.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter

import requests

VERSION = "1.28"
CAPACITY_REFUSAL = "Unable to allocate inventory"


def call(session: requests.Session, base: str, method: str, path: str,
         body: object = None, version: str = VERSION) -> tuple[int, dict | None]:
    headers = {"X-Auth-Token": "admin", "Accept": "application/json",
               "OpenStack-API-Version": f"placement {version}"}
    resp = session.request(method, base + path, json=body, headers=headers, timeout=120)
    return resp.status_code, (resp.json() if resp.content else None)


def _error(body: dict | None) -> tuple[str, str]:
    error = (body or {}).get("errors", [{}])[0]
    return error.get("code", ""), error.get("detail", "")


class Writer:
    """One writer: a random mix of new claims, moves, swaps (POST) and releases."""

    def __init__(self, base: str, provider_uuids: list[str], seed: int, project: str) -> None:
        self.base = base
        self.providers = provider_uuids
        self.rng = random.Random(seed)
        self.project = project
        self.session = requests.Session()
        # consumer -> (generation, allocations) as the server must have it.
        self.held: dict[str, tuple[int, dict]] = {}
        self.counts: Counter = Counter()
        self.failures: list[str] = []

    def _wanted(self) -> dict:
        first = self.rng.choice(self.providers)
        allocations = {first: {"resources": {"VCPU": self.rng.randint(1, 4)}}}
        if self.rng.random() < 0.5:
            other = self.rng.choice(self.providers)
            resources = allocations.setdefault(other, {"resources": {}})["resources"]
            resources["MEMORY_MB"] = self.rng.choice([256, 512, 768])
        return allocations

    def _entry(self, consumer: str, allocations: dict) -> dict:
        generation = self.held[consumer][0] if consumer in self.held else None
        return {"allocations": allocations, "project_id": self.project, "user_id": "writer",
                "consumer_generation": generation}

    def _record(self, kind: str, status: int, body: dict | None, changes: dict) -> None:
        """Count an answer; on success apply ``changes`` (consumer -> allocations)."""
        if status == 204:
            self.counts[f"{kind}_ok"] += 1
            for consumer, allocations in changes.items():
                if allocations:
                    generation = self.held[consumer][0] + 1 if consumer in self.held else 1
                    self.held[consumer] = (generation, allocations)
                else:
                    self.held.pop(consumer, None)
            return
        code, detail = _error(body)
        if status == 409 and CAPACITY_REFUSAL in detail:
            self.counts[f"{kind}_refused"] += 1
        elif (status == 409 and code == "placement.concurrent_update"
              and "consumer generation conflict" not in detail):
            # Documented answer once the service's own retries are used up.
            self.counts[f"{kind}_race"] += 1
        else:
            self.failures.append(f"{kind}: {status} {body}")

    def step(self) -> None:
        roll = self.rng.random()
        owned = list(self.held)
        if owned and roll < 0.2:
            consumer = self.rng.choice(owned)
            status, body = call(self.session, self.base, "DELETE", f"/allocations/{consumer}")
            if status == 204:
                self.counts["release_ok"] += 1
                del self.held[consumer]
            else:
                self.failures.append(f"release: {status} {body}")
        elif owned and roll < 0.4:
            consumer = self.rng.choice(owned)
            wanted = self._wanted()
            status, body = call(self.session, self.base, "PUT", f"/allocations/{consumer}",
                                self._entry(consumer, wanted))
            self._record("move", status, body, {consumer: wanted})
        elif len(owned) >= 2 and roll < 0.55:
            # Atomic swap: one consumer moves, another is emptied, a new one claims.
            mover, emptied = self.rng.sample(owned, 2)
            fresh = str(uuid.uuid4())
            changes = {mover: self._wanted(), emptied: {}, fresh: self._wanted()}
            body = {consumer: self._entry(consumer, allocations)
                    for consumer, allocations in changes.items()}
            status, answer = call(self.session, self.base, "POST", "/allocations", body)
            self._record("post", status, answer, changes)
        else:
            consumer = str(uuid.uuid4())
            wanted = self._wanted()
            status, body = call(self.session, self.base, "PUT", f"/allocations/{consumer}",
                                self._entry(consumer, wanted))
            self._record("claim", status, body, {consumer: wanted})

    def run(self, steps: int) -> dict:
        for _ in range(steps):
            try:
                self.step()
            except requests.RequestException as exc:  # noqa: PERF203 - noted, the run goes on
                self.failures.append(f"transport: {exc!r}")
        return {"held": {c: a for c, (_, a) in self.held.items()},
                "counts": dict(self.counts), "failures": self.failures}


def run_threads(base: str, provider_uuids: list[str], seeds: list[int], steps: int,
                project: str) -> list[dict]:
    """Several writers as threads of this process; their results in seed order."""
    results: list[dict] = [{} for _ in seeds]

    def target(index: int, seed: int) -> None:
        results[index] = Writer(base, provider_uuids, seed, project).run(steps)

    threads = [threading.Thread(target=target, args=(i, seed)) for i, seed in enumerate(seeds)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def process_main(queue, base: str, provider_uuids: list[str], seeds: list[int], steps: int,
                 project: str) -> None:
    """Entry point of a writer process (multiprocessing, spawn)."""
    queue.put(run_threads(base, provider_uuids, seeds, steps, project))


def contend(base: str, consumer: str, body: dict, start_at: float) -> tuple[int, str, str]:
    """One PUT fired at ``start_at``: (status, error code, detail)."""
    session = requests.Session()
    call(session, base, "GET", "/")  # connect before the start line
    time.sleep(max(0.0, start_at - time.time()))
    status, answer = call(session, base, "PUT", f"/allocations/{consumer}", body)
    code, detail = _error(answer) if status != 204 else ("", "")
    return status, code, detail


def contend_process_main(queue, base: str, consumer: str, body: dict, start_at: float) -> None:
    queue.put(contend(base, consumer, body, start_at))
