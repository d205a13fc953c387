"""No client can stop ``allotment serve`` answering others (a live server, loopback).

Half-sent requests and idle keep-alive connections cost the server a socket,
never an application thread; they are closed when their time is up. Every
refusal of the HTTP layer itself is a Placement error with a request id.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients import live
from tests.support import slow_clients

TIMEOUT = 4  # [allotment] request_timeout and keepalive_timeout for this server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[live.LiveServer]:
    workdir: Path = tmp_path_factory.mktemp("slow-clients")
    started = live.start(
        workdir, workers=2, threads=4,
        extra_conf=f"[allotment]\nrequest_timeout = {TIMEOUT}\n"
                   f"keepalive_timeout = {TIMEOUT}\nmax_request_body_size = 65536\n"
                   "max_request_header_size = 16384\n")
    yield started
    started.stop()


def test_held_connections_do_not_stop_answers(server: live.LiveServer) -> None:
    baseline = slow_clients.probe(server.url, 30)
    assert baseline.answered == 30
    with slow_clients.Hold(server.url, half_sent=1000, idle=1000) as held:
        during = slow_clients.probe(server.url, 30)
        assert during.statuses == [200] * 30
        # Barely changed: a poll over 2,000 sockets costs a few milliseconds.
        assert during.median_ms < baseline.median_ms + 25, (baseline.median_ms,
                                                            during.median_ms)
        closed = held.closed_by_server(within=TIMEOUT + 8)
        assert closed == 2000
    assert slow_clients.probe(server.url, 5).answered == 5


def _raw(server: live.LiveServer, data: bytes) -> tuple[str, dict[str, str], bytes]:
    host, port = slow_clients._address(server.url)
    with socket.create_connection((host, port), timeout=10) as sock:
        # The server may answer and close before reading it all.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionResetError:
            pass
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return lines[0], headers, body


@pytest.mark.parametrize(("request_bytes", "status"), [
    (b"BLAH\r\n\r\n", 400),
    (b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: many\r\n\r\n", 400),
    (b"GET /?" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 20000 + b"\r\n\r\n", 431),
    (b"POST /resource_providers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Content-Length: 100000\r\n\r\n{}", 413),
    (b"POST /resource_providers HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n" + b"8000\r\n" + b" " * 32768 + b"\r\n"
     + b"8000\r\n" + b" " * 32768 + b"\r\n" + b"8000\r\n" + b" " * 32768 + b"\r\n0\r\n\r\n",
     413),
    (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
])
def test_http_layer_refusals_are_placement_errors(server: live.LiveServer,
                                                  request_bytes: bytes, status: int) -> None:
    status_line, headers, body = _raw(server, request_bytes)
    assert status_line.split()[1] == str(status), status_line
    assert headers["content-type"] == "application/json"
    error = json.loads(body)["errors"][0]
    assert error["status"] == status
    assert error["request_id"] == headers["x-openstack-request-id"]
    assert error["request_id"].startswith("req-")
    assert len(body) < 400  # never an echo of what was sent


def test_a_declared_body_that_never_arrives_is_cut_off(server: live.LiveServer) -> None:
    host, port = slow_clients._address(server.url)
    with socket.create_connection((host, port), timeout=TIMEOUT + 8) as sock:
        sock.sendall(slow_clients.HALF_SENT[2])
        assert sock.recv(65536) == b""  # closed by the server, nothing answered
