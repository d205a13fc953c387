"""Every operation of the campaign, as the clients saw it, and the HTTP they spoke.

An operation is recorded with its invocation and completion times and its
answer, classified as the checker reads it:

- ``ok``: 2xx, an acknowledged write (or an answered read);
- ``refused``: a 4xx, the write did not happen;
- ``unavailable``: a 503, or the connection refused before anything was sent;
- ``indeterminate``: a timeout or a connection dropped after the request was
  sent: the write may or may not have happened.

Nothing here imports allotment: the checker must not trust the code it checks.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

VERSION = "placement 1.37"  # the last before consumer_type is required
TOKEN = "admin"  # noauth2: an admin
PROJECT = "6f1b0c1e-9b1c-4d7e-8f8b-1c2d3e4f5a6b"
USER = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"

Allocation = dict[str, int]  # provider uuid -> VCPU


@dataclass
class Answer:
    outcome: str  # ok, refused, unavailable, indeterminate
    status: int | None
    body: Any = None
    retry_after: bool = False
    error: str = ""


def request(url: str, method: str, path: str, body: Any = None,
            timeout: float = 15.0) -> Answer:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    headers = {"X-Auth-Token": TOKEN, "OpenStack-API-Version": VERSION,
               "Accept": "application/json"}
    data = None
    if body is not None:
        headers["Content-Type"] = "application/json"
        data = json.dumps(body).encode()
    try:
        try:
            conn.connect()
        except ConnectionRefusedError as error:
            return Answer("unavailable", None, error=f"connect: {error}")
        except OSError as error:
            return Answer("unavailable", None, error=f"connect: {error!r}")
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as error:
            return Answer("indeterminate", None, error=repr(error))
        status = response.status
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw[:300].decode(errors="replace")
        retry_after = response.getheader("Retry-After") is not None
        if 200 <= status < 300:
            outcome = "ok"
        elif status == 503:
            outcome = "unavailable"
        elif 400 <= status < 500:
            outcome = "refused"
        else:
            # A 500 (or any other): what happened is not known, and it is a fault.
            outcome = "indeterminate"
        return Answer(outcome, status, parsed, retry_after)
    finally:
        conn.close()


@dataclass
class Operation:
    index: int
    kind: str  # claim, move, release, probe_claim, probe_release, candidates, read,
    # settle_read
    server: str
    consumer: str | None
    before: Allocation | None  # the consumer's acknowledged allocation before
    target: Allocation | None  # what the write asks the consumer to hold
    invoked: float
    completed: float = 0.0
    outcome: str = ""
    status: int | None = None
    retry_after: bool = False
    error: str = ""
    during_fault: str | None = None
    held: Allocation | None = None  # what a settle_read answered the consumer holds

    @property
    def is_write(self) -> bool:
        return self.kind in ("claim", "move", "release", "probe_claim", "probe_release")


@dataclass
class History:
    began: float = field(default_factory=time.monotonic)
    operations: list[Operation] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fault: str | None = None  # the fault in force now, if any

    def invoke(self, kind: str, server: str, consumer: str | None = None,
               before: Allocation | None = None,
               target: Allocation | None = None) -> Operation:
        with self.lock:
            operation = Operation(len(self.operations), kind, server, consumer,
                                  None if before is None else dict(before),
                                  None if target is None else dict(target),
                                  time.monotonic() - self.began, during_fault=self.fault)
            self.operations.append(operation)
        return operation

    def complete(self, operation: Operation, answer: Answer) -> None:
        operation.completed = time.monotonic() - self.began
        operation.outcome = answer.outcome
        operation.status = answer.status
        operation.retry_after = answer.retry_after
        if (operation.kind == "settle_read" and answer.outcome == "ok"
                and isinstance(answer.body, dict)):
            operation.held = {rp: int(a["resources"].get("VCPU", 0))
                              for rp, a in answer.body.get("allocations", {}).items()}
        operation.error = answer.error or (str(answer.body)[:300] if answer.status and
                                           answer.status >= 500 else "")
