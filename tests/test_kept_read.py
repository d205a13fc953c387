"""KeptRead: one read at a time, kept for max_age; scrapes meanwhile answer the
kept value at once, so /metrics needs no slot of its own."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from allotment.metrics.kept import KeptRead


class _Source:
    def __init__(self) -> None:
        self.reads = 0
        self.keep = True
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def read(self) -> tuple[int, bool]:
        self.reads += 1
        self.entered.set()
        assert self.release.wait(10)
        return self.reads, self.keep


def test_kept_for_max_age_then_read_again():
    now = [100.0]
    source = _Source()
    kept = KeptRead(source.read, lambda: 10.0, clock=lambda: now[0])
    assert kept.get() == (1, 100.0)
    now[0] = 109.9
    assert kept.get() == (1, 100.0)
    now[0] = 110.0
    assert kept.get() == (2, 110.0)
    assert kept.reads == 2


def test_a_failed_read_is_not_kept():
    source = _Source()
    source.keep = False
    kept = KeptRead(source.read, lambda: 10.0)
    assert kept.get()[0] == 1
    assert kept.get()[0] == 2
    source.keep = True
    assert kept.get()[0] == 3
    assert kept.get()[0] == 3


def test_while_one_reads_the_others_answer_what_is_kept():
    now = [0.0]
    source = _Source()
    kept = KeptRead(source.read, lambda: 10.0, clock=lambda: now[0])
    assert kept.get()[0] == 1
    now[0] = 20.0  # stale
    source.entered.clear()
    source.release.clear()
    with ThreadPoolExecutor(11) as pool:
        reading = pool.submit(kept.get)
        assert source.entered.wait(10)
        # Ten more while the read is under way: none waits, none reads.
        others = [pool.submit(kept.get) for _ in range(10)]
        assert [future.result(timeout=5)[0] for future in others] == [1] * 10
        source.release.set()
        assert reading.result(timeout=10)[0] == 2
    assert source.reads == 2


def test_the_first_scrapes_wait_for_the_first_read_and_share_it():
    source = _Source()
    source.release.clear()
    kept = KeptRead(source.read, lambda: 10.0)
    with ThreadPoolExecutor(10) as pool:
        futures = [pool.submit(kept.get) for _ in range(10)]
        assert source.entered.wait(10)
        source.release.set()
        assert {future.result(timeout=10)[0] for future in futures} == {1}
    assert source.reads == 1
