"""The HTTP server behind ``allotment serve``: gunicorn's master, waitress's I/O.

gunicorn's master binds the listeners, pre-forks the worker processes and
supervises them (restart on death, graceful stop on SIGTERM). Each worker
serves with waitress: one I/O thread reads every connection without
blocking and buffers whole requests (line, headers and body); only a
complete request reaches the application threads. A client that sends half
a request, or nothing at all, costs a socket and a little memory, never a
thread, and is cut off when its time is up (``ConnectionLimits``). So is a
client that stops reading its answer; meanwhile its answer is buffered
within per-connection and per-worker bounds (``ANSWER_BUDGET``), beyond
which its thread waits for the client until the cut-off lets it go.

Every refusal the HTTP layer makes itself (malformed or ambiguous request,
headers or body too large) is answered in the Placement error format with a
request id, and the connection is closed. A worker out of file descriptors
pauses accepting rather than retrying at once; its ``connection_limit`` is
kept within RLIMIT_NOFILE.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import json
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from gunicorn.app.base import BaseApplication
from gunicorn.config import Config
from gunicorn.glogging import Logger as GunicornLogger
from gunicorn.workers.base import Worker
from oslo_config import cfg
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser, ParsingError
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask, ThreadedTaskDispatcher, WSGITask
from waitress.utilities import (
    BadRequest,
    Error,
    RequestEntityTooLarge,
    RequestHeaderFieldsTooLarge,
    find_double_newline,
)

from allotment import errors
from allotment.config import allotment_default
from allotment.http.environ import new_request_id
from allotment.http.errors import error_body

LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    """What a client may cost a worker ([allotment] options)."""

    request_timeout: float = allotment_default("request_timeout")
    keepalive_timeout: float = allotment_default("keepalive_timeout")
    max_request_header_size: int = allotment_default("max_request_header_size")
    max_request_body_size: int = allotment_default("max_request_body_size")
    connection_limit: int = allotment_default("connection_limit")

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> ConnectionLimits:
        opts = conf.allotment
        return cls(request_timeout=opts.request_timeout,
                   keepalive_timeout=opts.keepalive_timeout,
                   max_request_header_size=opts.max_request_header_size,
                   max_request_body_size=opts.max_request_body_size,
                   connection_limit=opts.connection_limit)


def _refusal_detail(error: Error) -> str:
    if isinstance(error, RequestEntityTooLarge):
        return "The request body is larger than this server accepts."
    if isinstance(error, RequestHeaderFieldsTooLarge):
        return "The request line and headers are larger than this server accepts."
    reason = str(getattr(error, "body", "") or "")
    if reason == "Content-Length is invalid":
        return "content-length header must be an integer"
    # waitress's reasons are short and never echo the request.
    return f"The request could not be parsed: {reason[:200]}"


class PlacementErrorTask(ErrorTask):
    """waitress's answer to a request it cannot take, as a Placement error."""

    def execute(self) -> None:
        error = self.request.error
        status = int(error.code)
        request_id = new_request_id()
        # No microversion was negotiated, but upstream's servers send the code.
        body = json.dumps(error_body(status, error.reason, _refusal_detail(error),
                                     errors.DEFAULT, request_id)).encode()
        self.status = f"{status} {error.reason}"
        self.response_headers.extend([
            ("Content-Type", "application/json"),
            ("x-openstack-request-id", request_id),
        ])
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)
        LOG.info("%s refused before the application: %s %s (%s)", self.channel.addr[0],
                 status, error.reason, request_id)


class PlacementTask(WSGITask):
    """waitress's WSGI call, with the path as the client sent it.

    waitress folds leading slashes (``//resource_providers`` becomes
    ``/resource_providers``); upstream's servers do not, and it answers 404.
    """

    def get_environment(self) -> dict:
        environ = super().get_environment()
        path = self.request.path
        if path.startswith("//") and not self.channel.server.adj.url_prefix:
            environ["PATH_INFO"] = path
        return environ


# A line feed without its carriage return, in the request line or headers.
_BARE_LF = re.compile(rb"(?<!\r)\n")
# A chunk-size line is a few hex digits, perhaps with an extension.
MAX_CHUNK_SIZE_LINE = 1024


class PlacementParser(HTTPRequestParser):
    """waitress's request parser, refusing what it would read in two ways or wait on.

    A refused request is complete at once (its refusal is answered and the
    connection closed): nothing sent after it is read as another request.
    """

    # waitress's attributes this class sets (annotations only: its defaults stay).
    completed: bool
    headers_finished: bool
    error: Error | None
    headers: dict[str, str]

    def received(self, data: bytes) -> int:
        if self.completed:
            return 0
        if self.body_rcv is None and self._bare_lf(data):
            # waitress waits for a CRLF CRLF that will never come.
            self._refuse(BadRequest("bare LF line ending: lines must end with CRLF"))
            return len(data)
        consumed: int = super().received(data)
        if self.chunked and not self.completed:
            self._check_chunks()
        if self.completed:
            # Complete (no body) or refused: the answer comes now, never a 100 first.
            self.expect_continue = False
        if self.error is not None:
            return len(data)
        return consumed

    def parse_header(self, header_plus: bytes) -> None:
        super().parse_header(header_plus)
        # RFC 9112 6.1: both lengths make the body's end ambiguous (request
        # smuggling behind a proxy that reads Content-Length); HTTP/1.0 has no
        # transfer codings, so there any Transfer-Encoding is (waitress pops it
        # only for HTTP/1.1).
        if self.chunked and "CONTENT_LENGTH" in self.headers:
            raise ParsingError("Content-Length and Transfer-Encoding are both set")
        if "TRANSFER_ENCODING" in self.headers:
            raise ParsingError(f"Transfer-Encoding is not allowed in HTTP/{self.version}")

    def _bare_lf(self, data: bytes) -> bool:
        """Whether ``data`` adds a bare LF to the request line or headers."""
        whole = self.header_plus + data
        end = find_double_newline(whole)
        return _BARE_LF.search(whole, len(self.header_plus),
                               end if end >= 0 else len(whole)) is not None

    def _check_chunks(self) -> None:
        chunks = self.body_rcv
        max_body = self.adj.max_request_body_size
        # waitress counts only the bytes received: a chunk declared larger
        # than the limit would be waited for, byte after byte.
        if chunks.__len__() + chunks.chunk_remainder >= max_body:
            self._refuse(RequestEntityTooLarge(f"exceeds max_body of {max_body}"))
        elif len(chunks.control_line) > MAX_CHUNK_SIZE_LINE:
            self._refuse(BadRequest("chunk-size line too long"))
        elif len(chunks.trailer) > self.adj.max_request_header_size:
            self._refuse(BadRequest("chunked trailer too long"))

    def _refuse(self, error: Error) -> None:
        if not self.headers_finished:
            # What the error answer needs of a request (waitress does the same
            # for headers that are too large).
            self.headers = {}
            HTTPRequestParser.parse_header(self, b"GET / HTTP/1.0\r\n")
            self.headers_finished = True
        self.error = error
        self.completed = True


# What the clients' answers not yet sent may take, in memory and temporary
# files. A slow client's answer is buffered, so that its application thread
# serves others meanwhile, up to:
# - one connection's: waitress's high watermark, which it checks only before
#   each write, so an answer is written in pieces to be held to it;
OUTBUF_HIGH_WATERMARK = 64 * 1024 * 1024
WRITE_PIECE = 1024 * 1024
# - all of a worker's connections': beyond it, the thread of an answer whose
#   client has not taken the last piece yet waits for it (or for its cut-off).
ANSWER_BUDGET = 128 * 1024 * 1024
BUDGET_RECHECK = 0.25  # seconds; other connections' progress wakes no one
# Beyond this a buffered answer is in a temporary file, not in memory.
OUTBUF_OVERFLOW = 1024 * 1024


class PlacementChannel(HTTPChannel):
    """A connection that remembers when its current request began."""

    task_class = PlacementTask
    error_task_class = PlacementErrorTask
    parser_class = PlacementParser
    request_started = 0.0
    served = False
    # When the answer now waiting for the client began to be buffered
    # (time.time(), as waitress's last_activity): a slow reader's time counts
    # from here, not from the request's arrival (the answer may take long to make).
    answer_started = 0.0

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self.request_started = time.time()
        return super().received(data)

    def service(self) -> None:
        self.served = True
        super().service()

    def readable(self) -> bool:
        # Closed by maintenance while the poll was being set up.
        return self.socket is not None and bool(super().readable())

    def writable(self) -> bool:
        return self.socket is not None and bool(super().writable())

    def write_soon(self, data: bytes) -> int:
        if not self.total_outbufs_len:
            self.answer_started = time.time()
        if not isinstance(data, bytes) or len(data) <= WRITE_PIECE:
            written: int = super().write_soon(data)
            return written
        for start in range(0, len(data), WRITE_PIECE):
            self._wait_for_budget()
            super().write_soon(data[start:start + WRITE_PIECE])
        return len(data)

    def _wait_for_budget(self) -> None:
        """Over the worker's answer budget, buffer more only once the client has
        taken what was buffered: a client that reads goes on at its pace, one that
        stalls is cut off. (Less than send_bytes is left for the task to send.)"""
        while self.connected and self.total_outbufs_len >= self.adj.send_bytes \
                and buffered_answers(self._map) >= ANSWER_BUDGET:
            with self.outbuf_lock:
                self.outbuf_lock.wait(BUDGET_RECHECK)

    def cut_off(self) -> None:
        """Close now: frees the buffered answer and wakes a thread waiting to write."""
        self.will_close = True
        self.handle_close()


def buffered_answers(socket_map: dict) -> int:
    """Bytes of answers a worker holds for its clients (memory and temporary files)."""
    return sum(getattr(channel, "total_outbufs_len", 0) for channel in list(socket_map.values()))


# accept() errors that say the process (or system) is out of descriptors or
# memory: retrying at once fails the same way.
_SHORT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# How long a listener stops accepting after such an error.
ACCEPT_PAUSE = 0.5
# While short, one warning line at most this often.
SHORT_WARNING_INTERVAL = 30.0


class PlacementServer(TcpWSGIServer):
    """A listener whose maintenance enforces ``ConnectionLimits``' timeouts, and that
    waits a little when it runs out of file descriptors rather than retrying at once."""

    channel_class = PlacementChannel
    limits = ConnectionLimits()
    accept_again_at = 0.0  # time.monotonic()
    short_since: float | None = None  # out of descriptors since
    short_warned = float("-inf")

    def maintenance(self, now: float) -> None:
        limits = self.limits
        for channel in list(self.active_channels.values()):
            if not _overdue(channel, now, limits):
                continue
            if channel.total_outbufs_len:
                LOG.info("%s stopped reading its answer: closed after %g s without progress "
                         "(%d bytes unsent)", channel.addr[0], limits.request_timeout,
                         channel.total_outbufs_len)
            # Closed here rather than flagged for the poll: a client that does
            # not read never makes its socket writable again.
            channel.cut_off()

    def readable(self) -> bool:
        accepting: bool = super().readable()  # maintenance and connection_limit
        return accepting and time.monotonic() >= self.accept_again_at

    def handle_accept(self) -> None:
        failure: OSError | None = None
        try:
            pair = self.accept()
        except OSError as error:
            failure = error
        # Logged outside the except: the log formatter would add the exception.
        if failure is not None:
            if failure.errno in _SHORT_OF_DESCRIPTORS:
                self._short_of_descriptors(failure)
            else:
                # One connection's trouble (gone with it): no pause.
                LOG.info("accept() failed: %s", failure)
            return
        if pair is None:
            return
        if self.short_since is not None:
            if self.short_warned >= self.short_since:  # quiet when it comes and goes
                LOG.info("accepting connections again after %.1f s out of file descriptors",
                         time.monotonic() - self.short_since)
            self.short_since = None
        conn, addr = pair
        try:
            self.set_socket_options(conn)
            self.channel_class(self, conn, self.fix_addr(addr), self.adj, map=self._map)
        except OSError:
            conn.close()  # gone already

    def _short_of_descriptors(self, error: OSError) -> None:
        now = time.monotonic()
        self.accept_again_at = now + ACCEPT_PAUSE
        if self.short_since is None:
            self.short_since = now
        if now - self.short_warned < SHORT_WARNING_INTERVAL:
            return
        self.short_warned = now
        LOG.warning("out of file descriptors (%s) with %d connections open: accepting "
                    "again every %g s until some close; open ones are still served",
                    os.strerror(error.errno or 0), len(self.active_channels), ACCEPT_PAUSE)


def _overdue(channel: PlacementChannel, now: float, limits: ConnectionLimits) -> bool:
    """Whether a connection has had its time (checked once a second)."""
    if channel.total_outbufs_len > 0:
        # An answer waits for the client to read it (its application thread
        # may still be writing): cut off once it makes no progress, counted
        # from the last byte sent or from when the answer began, whichever is
        # later (a client that waited for a slow answer has not stalled).
        return max(channel.last_activity, channel.answer_started) < now - limits.request_timeout
    if channel.requests:
        return False  # being answered
    if channel.request is not None:
        # Half-sent: the whole request must arrive within the request timeout.
        return channel.request_started < now - limits.request_timeout
    if not channel.served:
        # Opened and silent.
        return channel.creation_time < now - limits.request_timeout
    return channel.last_activity < now - limits.keepalive_timeout


def adjustments_for(limits: ConnectionLimits, threads: int, backlog: int,
                    **listen: object) -> Adjustments:
    """waitress's settings for a worker (``listen``: its sockets, or host and port)."""
    return Adjustments(
        threads=threads,
        connection_limit=limits.connection_limit,
        max_request_header_size=limits.max_request_header_size,
        max_request_body_size=limits.max_request_body_size,
        # Our maintenance applies the timeouts; waitress's own is a backstop.
        channel_timeout=max(limits.request_timeout, limits.keepalive_timeout) * 4,
        cleanup_interval=1,
        outbuf_high_watermark=OUTBUF_HIGH_WATERMARK,
        outbuf_overflow=OUTBUF_OVERFLOW,
        asyncore_use_poll=True,
        # Read ahead while a request is served, so that a client that has
        # gone is seen (waitress.client_disconnected: searches stop).
        channel_request_lookahead=1,
        backlog=backlog,
        ident="",
        **listen,
    )


class WaitressWorker(Worker):
    """A gunicorn worker process that serves its listeners with waitress."""

    def run(self) -> None:
        limits: ConnectionLimits = getattr(self.app, "limits", ConnectionLimits())
        adjustments = adjustments_for(
            limits, threads=self.cfg.threads, backlog=self.cfg.backlog,
            sockets=[listener.sock for listener in self.sockets])
        socket_map: dict = {}
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(adjustments.threads)
        servers = []
        for sock in adjustments.sockets:
            server = PlacementServer(
                self.wsgi, socket_map, True, sock, dispatcher=dispatcher, adj=adjustments,
                bind_socket=False,
                sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()))
            server.limits = limits
            servers.append(server)
        parent = os.getppid()
        while self.alive:
            self.notify()
            wasyncore.loop(timeout=1.0, map=socket_map, use_poll=True, count=1)
            if os.getppid() != parent:
                LOG.warning("gunicorn master %s is gone; worker %s stops", parent, self.pid)
                break
        self._stop(servers, socket_map, dispatcher)

    def _stop(self, servers: list[PlacementServer], socket_map: dict,
              dispatcher: ThreadedTaskDispatcher) -> None:
        """Stop accepting, let answers being made finish, then close everything."""
        for server in servers:
            server.accepting = False
            server.del_channel()
            server.socket.close()
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while time.monotonic() < deadline and (_tasks_running(dispatcher) or any(
                channel.requests for server in servers
                for channel in server.active_channels.values())):
            self.notify()
            wasyncore.loop(timeout=0.2, map=socket_map, use_poll=True, count=1)
        # The task threads end before the trigger closes: a task that has just
        # answered still pulls the trigger (its channel's requests are already
        # empty by then), and a closed trigger made that an EBADF traceback.
        dispatcher.shutdown(cancel_pending=True, timeout=1)
        for server in servers:
            for channel in list(server.active_channels.values()):
                channel.close()
            server.trigger.close()


def _tasks_running(dispatcher: ThreadedTaskDispatcher) -> bool:
    """Whether a task thread is busy or a task waits for one (waitress's own counts)."""
    with dispatcher.lock:
        return bool(dispatcher.active_count or dispatcher.queue)


class PlacementLogger(GunicornLogger):
    """gunicorn's own messages through the handlers ``allotment.logs`` set up.

    No access log: the request log (``allotment.http.requestlog``) has the lines.
    """

    def setup(self, cfg: Config) -> None:
        super().setup(cfg)
        for handler in list(self.error_log.handlers):
            self.error_log.removeHandler(handler)
        self.error_log.propagate = True
        self.access_log.handlers = []
        self.access_log.propagate = False


class Server(BaseApplication):
    def __init__(self, app_factory: Callable[[], Callable], options: dict,
                 limits: ConnectionLimits) -> None:
        self.app_factory = app_factory
        self.options = options
        self.limits = limits
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Callable:
        app = self.app_factory()
        # What the worker built so far lives as long as it does: keep the
        # cyclic GC from re-scanning it whenever a big answer allocates.
        gc.collect()
        gc.freeze()
        return app


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(app_factory: Callable[[], Callable], host: str, port: int, workers: int,
          threads: int, log_level: str = "info", on_ready: Callable | None = None,
          limits: ConnectionLimits | None = None,
          extra_listen: list[tuple[str, int]] | None = None,
          child_exit: Callable[[int], None] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; ``extra_listen`` adds listeners (e.g. metrics)."""
    binds = [_bind(host, port)] + [_bind(h, p) for h, p in extra_listen or []]
    options = {
        "bind": binds,
        "workers": workers,
        "threads": threads,
        "worker_class": "allotment.server.WaitressWorker",
        "loglevel": log_level,
        "accesslog": None,
        "logger_class": "allotment.server.PlacementLogger",
        # The I/O loop notifies the master every second; a worker that
        # misses 30 s of heartbeats is wedged and is replaced.
        "timeout": 30,
        "graceful_timeout": 10,
        "backlog": 2048,
        "proc_name": "allotment",
        "reuse_port": False,
        # No control socket in the home directory (several servers may run).
        "control_socket_disable": True,
    }
    if on_ready is not None:
        options["when_ready"] = lambda _arbiter: on_ready()
    if child_exit is not None:
        options["child_exit"] = lambda _arbiter, worker: child_exit(worker.pid)
    _raise_open_files_limit()
    limits = _fit_open_files(limits or ConnectionLimits(), threads)
    Server(app_factory, options, limits).run()


def _raise_open_files_limit() -> None:
    """Every held connection is a file descriptor: allow as many as the system does."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


# Descriptors a worker needs besides its connections: per application thread,
# a database connection (SQLite's WAL adds two files) and a request body and
# an answer spilled to temporary files; in all, listeners, wake-up pipes, logs,
# the heartbeat file and the read model's and health probe's connections.
FDS_PER_THREAD = 5
FDS_SPARE = 32
MIN_CONNECTION_LIMIT = 16


def _fit_open_files(limits: ConnectionLimits, threads: int) -> ConnectionLimits:
    """``connection_limit`` lowered to what RLIMIT_NOFILE leaves (logged once, here in
    the master: every worker gets the same limit and has the same descriptors)."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, ValueError, OSError):
        return limits
    if soft == resource.RLIM_INFINITY:
        return limits
    kept = _open_descriptors() + FDS_PER_THREAD * threads + FDS_SPARE
    allowed = max(soft - kept, MIN_CONNECTION_LIMIT)
    if limits.connection_limit <= allowed:
        return limits
    LOG.warning("[allotment] connection_limit %d is more than the open files limit (%d) "
                "allows with %d kept for the database, temporary files and logs: each "
                "worker accepts %d connections", limits.connection_limit, soft, kept, allowed)
    return dataclasses.replace(limits, connection_limit=allowed)


def _open_descriptors() -> int:
    for directory in ("/proc/self/fd", "/dev/fd"):
        with contextlib.suppress(OSError):
            return len(os.listdir(directory)) - 1  # less listdir's own
    return 16
