"""Independent schedulers claiming, moving and releasing through every server.

Each scheduler owns the consumers it made and writes each one in order, so
the history of one consumer is sequential and the checker can say what it
must hold. A consumer whose last write ended without a definite answer (503,
timeout, dropped connection) is not written again while it may still change:
its state is then one of two, and the checker accepts either, as long as every
node agrees. Once no fault is in force and ``SETTLE_AFTER`` seconds have
passed, its scheduler reads it (the checker resolves the uncertain write by
that read) and releases it, until a definite answer: otherwise such consumers
keep their capacity for good and, over a long run, fill every provider.

A few hot providers (small, most claims go there: contention, refusals for
capacity) and many cold ones. Probe providers (one per server) are only
written by the nemesis' recovery probes.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field

from tests.faults.history import PROJECT, USER, Allocation, History, request

HOT_VCPUS = 12
COLD_VCPUS = 48
PROBE_VCPUS = 100000
# Seconds after a write without a definite answer before its consumer is read
# and released: longer than a server takes to finish or give up a request
# (the clients' timeout is 15 s), so the write cannot still land afterwards.
SETTLE_AFTER = 30.0


@dataclass
class Providers:
    hot: list[str]
    cold: list[str]
    probes: list[str]  # one per server, in the servers' order

    @property
    def workload(self) -> list[str]:
        return self.hot + self.cold

    @property
    def every(self) -> list[str]:
        return self.hot + self.cold + self.probes


def make_providers(url: str, hot: int, cold: int, probes: int) -> Providers:
    def make(vcpus: int) -> str:
        rp = str(uuid.uuid4())
        answer = request(url, "POST", "/resource_providers", {"uuid": rp, "name": f"f-{rp}"})
        assert answer.outcome == "ok", answer
        answer = request(url, "PUT", f"/resource_providers/{rp}/inventories", {
            "resource_provider_generation": 0,
            "inventories": {"VCPU": {"total": vcpus, "max_unit": vcpus}}})
        assert answer.outcome == "ok", answer
        return rp

    return Providers([make(HOT_VCPUS) for _ in range(hot)],
                     [make(COLD_VCPUS) for _ in range(cold)],
                     [make(PROBE_VCPUS) for _ in range(probes)])


def claim_body(allocation: Allocation, generation: int | None) -> dict:
    return {"allocations": {rp: {"resources": {"VCPU": n}} for rp, n in allocation.items()},
            "project_id": PROJECT, "user_id": USER, "consumer_generation": generation}


@dataclass
class Scheduler:
    number: int
    urls: dict[str, str]  # server name -> url
    providers: Providers
    history: History
    stop: threading.Event
    seed: int
    owned: dict[str, Allocation] = field(default_factory=dict)  # writable consumers
    # Consumers whose last write had no definite answer -> when it ended.
    uncertain: dict[str, float] = field(default_factory=dict)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed * 1000 + self.number)

    def _provider(self) -> str:
        if self.rng.random() < 0.6:
            return self.rng.choice(self.providers.hot)
        return self.rng.choice(self.providers.cold)

    def _server(self) -> tuple[str, str]:
        name = self.rng.choice(sorted(self.urls))
        return name, self.urls[name]

    def run(self) -> None:
        while not self.stop.is_set():
            settled = self._settled()
            if settled is not None:
                self.settle(settled)
                continue
            roll = self.rng.random()
            if roll < 0.40 or not self.owned:
                self.claim()
            elif roll < 0.60:
                self.move()
            elif roll < 0.85:
                self.release()
            else:
                self.candidates()

    def _write(self, kind: str, consumer: str, target: Allocation, method: str,
               path: str, body: dict | None) -> str:
        name, url = self._server()
        before = self.owned.get(consumer, {})
        operation = self.history.invoke(kind, name, consumer, before, target)
        answer = request(url, method, path, body)
        self.history.complete(operation, answer)
        if answer.outcome == "ok":
            self.uncertain.pop(consumer, None)
            if target:
                self.owned[consumer] = target
            else:
                self.owned.pop(consumer, None)
        elif answer.outcome == "refused":
            if consumer in self.uncertain and not target:
                # Releasing a consumer that holds nothing (404): settled.
                self.uncertain.pop(consumer)
        else:
            self.owned.pop(consumer, None)  # unknown state: left until settled
            self.uncertain[consumer] = time.monotonic()
        return answer.outcome

    def _settled(self) -> str | None:
        """An uncertain consumer that can be settled now, if any."""
        if self.history.fault is not None or not self.uncertain:
            return None
        consumer, ended = min(self.uncertain.items(), key=lambda item: item[1])
        return consumer if time.monotonic() - ended >= SETTLE_AFTER else None

    def settle(self, consumer: str) -> None:
        """Read what an uncertain consumer holds, then release it."""
        name, url = self._server()
        operation = self.history.invoke("settle_read", name, consumer)
        answer = request(url, "GET", f"/allocations/{consumer}")
        self.history.complete(operation, answer)
        if answer.outcome != "ok":
            self.uncertain[consumer] = time.monotonic()  # try again later
            return
        self._write("release", consumer, {}, "DELETE", f"/allocations/{consumer}", None)

    def claim(self) -> None:
        consumer = str(uuid.uuid4())
        target = {self._provider(): self.rng.randint(1, 4)}
        self._write("claim", consumer, target, "PUT", f"/allocations/{consumer}",
                    claim_body(target, None))

    def _pick(self) -> str:
        return self.rng.choice(sorted(self.owned))

    def move(self) -> None:
        consumer = self._pick()
        name, url = self._server()
        operation = self.history.invoke("read", name, consumer)
        answer = request(url, "GET", f"/allocations/{consumer}")
        self.history.complete(operation, answer)
        if answer.outcome != "ok" or not isinstance(answer.body, dict):
            return
        generation = answer.body.get("consumer_generation")
        amount = sum(self.owned[consumer].values())
        target = {self._provider(): amount}
        # POST /allocations, as nova moves an instance (here: all of it, elsewhere).
        body = {consumer: claim_body(target, generation)}
        self._write("move", consumer, target, "POST", "/allocations", body)

    def release(self) -> None:
        consumer = self._pick()
        self._write("release", consumer, {}, "DELETE", f"/allocations/{consumer}", None)

    def candidates(self) -> None:
        name, url = self._server()
        operation = self.history.invoke("candidates", name)
        answer = request(url, "GET", "/allocation_candidates?resources=VCPU:2&limit=5")
        self.history.complete(operation, answer)


def run_schedulers(count: int, urls: dict[str, str], providers: Providers,
                   history: History, stop: threading.Event, seed: int) -> list[threading.Thread]:
    threads = []
    for number in range(count):
        scheduler = Scheduler(number, urls, providers, history, stop, seed)
        thread = threading.Thread(target=scheduler.run, name=f"scheduler-{number}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads
