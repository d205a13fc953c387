"""Packet filter rules between loopback addresses, always taken away again.

``PacketFilter`` makes a chain of its own in iptables' filter table, jumped to
from OUTPUT (traffic between 127.0.0.x addresses leaves through OUTPUT like
traffic between hosts), and adds its rules there. Leaving the ``with`` block
-- normally, on an exception or on KeyboardInterrupt -- flushes and deletes
the chain, so nothing stays behind. ``heal()`` removes the rules and keeps the
chain for the next fault.

Needs root and Debian's ``iptables`` (``.ci/run`` installs it); ``missing()``
says why it cannot run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import TracebackType


class PacketFilter:
    def __init__(self, chain: str | None = None) -> None:
        # The process id in the name: two campaigns at once keep apart.
        self.chain = chain or f"ALLOTMENT-FAULTS-{os.getpid()}"
        self.rules: list[list[str]] = []

    @staticmethod
    def missing() -> str | None:
        if shutil.which("iptables") is None:
            return "iptables is not installed"
        if os.geteuid() != 0:
            return "the packet filter needs root"
        return None

    @staticmethod
    def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["iptables", "-w", "5", *args], capture_output=True,
                              text=True, check=check)

    def __enter__(self) -> PacketFilter:
        self._remove_chain()  # what a killed earlier run of this process id left
        self._run("-N", self.chain)
        try:
            self._run("-I", "OUTPUT", "1", "-j", self.chain)
        except BaseException:
            self._run("-X", self.chain, check=False)
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._remove_chain()

    def _remove_chain(self) -> None:
        while self._run("-D", "OUTPUT", "-j", self.chain, check=False).returncode == 0:
            pass
        self._run("-F", self.chain, check=False)
        self._run("-X", self.chain, check=False)
        self.rules.clear()

    def _add(self, rule: list[str]) -> None:
        self._run("-A", self.chain, *rule)
        self.rules.append(rule)

    def cut(self, source: str, destination: str) -> None:
        """Drop every packet from ``source`` to ``destination`` (one direction)."""
        self._add(["-s", source, "-d", destination, "-j", "DROP"])

    def isolate(self, side: list[str], other: list[str]) -> None:
        """Cut every link between the two groups, both directions."""
        for a in side:
            for b in other:
                self.cut(a, b)
                self.cut(b, a)

    def drop_share(self, source: str, destination: str, probability: float) -> None:
        """Drop a random share of the packets from ``source`` to ``destination``."""
        self._add(["-s", source, "-d", destination, "-m", "statistic", "--mode", "random",
                   "--probability", f"{probability:.3f}", "-j", "DROP"])

    def heal(self) -> None:
        """Remove every rule added so far (the chain stays, empty)."""
        self._run("-F", self.chain)
        self.rules.clear()

    def listing(self) -> str:
        """Every rule of the filter table, as ``iptables -S`` shows them."""
        return self._run("-S").stdout
