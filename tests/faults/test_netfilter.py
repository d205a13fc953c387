"""The packet filter cuts exactly the link it names, and leaves no rule behind."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from tests.faults.netfilter import PacketFilter
from tests.support.needs import require

pytestmark = pytest.mark.faults


@pytest.fixture(autouse=True)
def _needs_packet_filter() -> None:
    require(PacketFilter.missing(), "the fault tests cannot run")


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.10 accepting (and closing) every connection."""
    sock = socket.socket()
    sock.bind(("127.0.0.10", 0))
    sock.listen(16)
    sock.settimeout(0.2)
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        done.set()
        thread.join()
        sock.close()


def _connects(source: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(1.0)
        try:
            sock.connect(("127.0.0.10", port))
        except TimeoutError:
            return False
        return True


def _chains() -> str:
    return subprocess.run(["iptables", "-S"], capture_output=True, text=True,
                          check=True).stdout


def test_a_cut_times_out_that_link_only(listener: int) -> None:
    with PacketFilter() as rules:
        assert _connects("127.0.0.9", listener)
        rules.cut("127.0.0.9", "127.0.0.10")
        assert rules.chain in rules.listing()
        assert not _connects("127.0.0.9", listener)
        assert _connects("127.0.0.11", listener)
        rules.heal()
        assert _connects("127.0.0.9", listener)
    assert rules.chain not in _chains()


def test_a_random_share_drops_some_packets(listener: int) -> None:
    with PacketFilter() as rules:
        rules.drop_share("127.0.0.9", "127.0.0.10", 1.0)
        assert not _connects("127.0.0.9", listener)
        rules.heal()
        rules.drop_share("127.0.0.9", "127.0.0.10", 0.0)
        assert _connects("127.0.0.9", listener)


def test_rules_are_removed_on_an_error_and_an_interrupt(listener: int) -> None:
    for raised in (RuntimeError("a test failed"), KeyboardInterrupt()):
        with pytest.raises(type(raised)), PacketFilter() as rules:
            rules.isolate(["127.0.0.9"], ["127.0.0.10"])
            raise raised
        assert rules.chain not in _chains()
        assert _connects("127.0.0.9", listener)
