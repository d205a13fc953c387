"""An open-loop request generator: a schedule sent at its times, latency from the schedule.

A dispatcher thread hands each event out at its scheduled time to an idle sender
(the most recently idle first, so that few keep-alive connections stay hot and none
idles long enough to be closed), or queues it when every sender is busy. A request
that waits in that queue is late because the server is slow, and its latency says
so (it counts from the scheduled time). A request the dispatcher itself hands out
late is the generator's fault: ``RunTally.dispatch_lags`` records how late each
was handed out, so a report can refuse a run whose generator fell behind.

Events are plain requests built once (``Prepared``) or actions (a few requests
depending on the answers), run by an actor of the caller's, one per sender. Also
here: the CPU meters, from /proc, for the server, the database and the generator.
Standard library only.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from http_client import PlacementClient, Prepared, RequestTimeout
from measure import percentile


@dataclass(order=True)
class Event:
    at: float  # seconds after the start of the run
    kind: str = field(compare=False)
    request: Prepared | None = field(compare=False, default=None)  # a plain request
    payload: object = field(compare=False, default=None)  # what an action needs


@dataclass
class KindTally:
    """One kind of call or action: latencies from the scheduled time, and outcomes."""

    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)  # final outcome: HTTP status or text
    errors: int = 0
    conflicts: int = 0  # 409s met on the way (claims, swaps, deletes)
    requests: int = 0

    def merge(self, other: KindTally) -> None:
        self.latencies += other.latencies
        self.statuses.update(other.statuses)
        self.errors += other.errors
        self.conflicts += other.conflicts
        self.requests += other.requests

    def p(self, pct: float) -> float | None:
        return percentile(self.latencies, pct) if self.latencies else None

    def as_dict(self) -> dict:
        return {"n": len(self.latencies), "p50_s": self.p(50), "p99_s": self.p(99),
                "max_s": max(self.latencies) if self.latencies else None,
                "errors": self.errors, "conflicts": self.conflicts,
                "requests": self.requests,
                "statuses": {str(k): v for k, v in sorted(self.statuses.items(), key=str)}}


class Failed(Exception):
    """An action that could not be done: an error of the run."""


Actor = Callable[[Event, KindTally], None]


@dataclass
class RunTally:
    """What one run sent, per kind of event, and how well it kept to its schedule."""

    kinds: dict[str, KindTally] = field(default_factory=dict)
    dispatch_lags: list[float] = field(default_factory=list)  # seconds, window only
    not_sent: int = 0  # scheduled in the window, still waiting when the run ended
    scheduled: Counter = field(default_factory=Counter)  # kind: events in the window
    longest_collection: float = 0.0  # seconds: the generator's longest GC pause

    def kind(self, name: str) -> KindTally:
        return self.kinds.setdefault(name, KindTally())


class Generator:
    """Sends a schedule open-loop over ``senders`` keep-alive connections.

    ``make_actor(index, client)`` gives each sender the function that runs an event
    without a ``request`` (an action), recording its requests and 409s in the tally
    given; it raises ``Failed`` (or lets a timeout or connection error through) when
    the action could not be done.
    """

    def __init__(self, url: str, senders: int, timeout: float,
                 make_actor: Callable[[int, PlacementClient], Actor] | None = None) -> None:
        self.client = PlacementClient(url, timeout=timeout)
        self.senders = senders
        self.timeout = timeout
        self.make_actor = make_actor
        self._lock = threading.Lock()
        self._idle: list[_Sender] = []
        self._backlog: deque[Event] = deque()

    def run(self, events: list[Event], warmup: float, window: float) -> RunTally:
        """Send ``events`` (in time order) from now on; those before ``warmup`` are not
        counted, those after ``warmup + window`` not sent. Returns once every sender
        is done, or one timeout after the last event was handed out."""
        # What the caller built (the schedule, a big cloud's hosts and instances) lives
        # for the whole run: left to the collector, each full collection walked all of it
        # while holding the GIL (110 ms at 20,000 hosts, idle machine), and the dispatcher
        # handed out late every few seconds. Frozen, a collection walks only what the run
        # itself makes (parsed answers, tallies).
        gc.collect()
        gc.freeze()
        pauses = _CollectionPauses()
        gc.callbacks.append(pauses)
        try:
            tally = self._run(events, warmup, window)
        finally:
            gc.callbacks.remove(pauses)
            gc.unfreeze()
        tally.longest_collection = pauses.longest
        return tally

    def _run(self, events: list[Event], warmup: float, window: float) -> RunTally:
        start = time.perf_counter() + 0.2
        window_end = warmup + window
        workers = [_Sender(self, index, start, warmup) for index in range(self.senders)]
        for worker in workers:
            worker.thread.start()
        tally = RunTally()
        for event in events:
            if event.at >= window_end:
                break
            delay = start + event.at - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            with self._lock:
                if self._idle:
                    sender = self._idle.pop()
                    sender.idle = False
                    sender.inbox.append(event)
                    sender.ready.notify()
                else:
                    self._backlog.append(event)
            if event.at >= warmup:
                tally.dispatch_lags.append(time.perf_counter() - start - event.at)
                tally.scheduled[event.kind] += 1
        # What was handed out may finish within one timeout; the rest is dropped.
        deadline = time.perf_counter() + self.timeout
        while time.perf_counter() < deadline:
            with self._lock:
                if not self._backlog and len(self._idle) == len(workers):
                    break
            time.sleep(0.05)
        with self._lock:
            tally.not_sent = sum(1 for event in self._backlog if event.at >= warmup)
            self._backlog.clear()
        for worker in workers:
            worker.stop()
        for worker in workers:
            worker.thread.join(timeout=self.timeout + 5)
            for kind, kind_tally in worker.tally.items():
                tally.kind(kind).merge(kind_tally)
        return tally


class _CollectionPauses:
    """A ``gc.callbacks`` entry: the longest collection seen, in seconds."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._began)


class _Sender:
    """One connection: runs the events handed to it, or queued, one at a time."""

    def __init__(self, generator: Generator, index: int, start: float,
                 warmup: float) -> None:
        self.generator = generator
        self.start = start
        self.warmup = warmup
        self.inbox: list[Event] = []
        self.ready = threading.Condition(generator._lock)
        self.stopping = False
        self.idle = False
        self.tally: dict[str, KindTally] = {}
        self.act = (generator.make_actor(index, generator.client)
                    if generator.make_actor is not None else None)
        self.thread = threading.Thread(target=self._loop, name=f"sender-{index}",
                                       daemon=True)

    def stop(self) -> None:
        with self.ready:
            self.stopping = True
            self.ready.notify()

    def _next(self) -> Event | None:
        with self.ready:
            while True:
                if self.inbox:
                    return self.inbox.pop()
                if self.generator._backlog:
                    return self.generator._backlog.popleft()
                if self.stopping:
                    return None
                if not self.idle:
                    self.idle = True
                    self.generator._idle.append(self)
                self.ready.wait()

    def _loop(self) -> None:
        try:
            while True:
                event = self._next()
                if event is None:
                    return
                self._run(event)
        finally:
            self.generator.client.close_own()  # the other senders may still send

    def _run(self, event: Event) -> None:
        if event.at >= self.warmup:
            tally = self.tally.setdefault(event.kind, KindTally())
        else:
            tally = KindTally()  # the warm-up's: not counted
        outcome: object
        try:
            if event.request is not None:
                tally.requests += 1
                reply = self.generator.client.send(event.request, self.generator.timeout)
                outcome, ok = reply.status, 200 <= reply.status < 300
            elif self.act is not None:
                self.act(event, tally)
                outcome, ok = "done", True
            else:
                raise Failed(f"no actor for {event.kind}")
        except Failed as exc:
            outcome, ok = str(exc), False
        except RequestTimeout:
            outcome, ok = "timeout", False
        except OSError as exc:
            outcome, ok = type(exc).__name__, False
        tally.statuses[outcome] += 1
        if ok:
            tally.latencies.append(time.perf_counter() - self.start - event.at)
        else:
            tally.errors += 1


# --- what it cost -----------------------------------------------------------------------

TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float | None:
    """User and system CPU of one process (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS


def descendants(pid: int) -> list[int]:
    """A process and every process below it (uwsgi's router and workers, allotment's)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in os.listdir(f"/proc/{current}/task"):
                with contextlib.suppress(OSError):
                    pending += [int(child) for child in
                                Path(f"/proc/{current}/task/{task}/children").read_text().split()]
    return found


def database_pids(kind: str, database: str) -> list[int]:
    """The database's processes that work for this run: on PostgreSQL the backends
    connected to its database (their title names it); on MariaDB the whole server (one
    process: other users of the server are counted too)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            if kind == "postgresql" and comm == "postgres":
                title = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
                if f" {database} ".encode() in title:
                    found.append(int(entry))
            elif kind == "mysql" and comm in ("mariadbd", "mysqld"):
                found.append(int(entry))
        except OSError:
            continue
    return found


class CpuMeter:
    """CPU seconds spent by a changing set of processes between start() and stop()."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.before: dict[int, float] = {}
        self.started = 0.0

    def start(self) -> None:
        self.before = {pid: cpu for pid in self.pids()
                       if (cpu := _cpu_seconds(pid)) is not None}
        self.started = time.perf_counter()

    def stop(self) -> tuple[float, float]:
        """CPU seconds used, and the wall seconds since start()."""
        used = 0.0
        for pid in self.pids():
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                used += cpu - self.before.get(pid, 0.0)
        return used, time.perf_counter() - self.started


