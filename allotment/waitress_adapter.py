"""waitress behind allotment's HTTP server: every use of its internals, in one place.

``allotment.server`` runs gunicorn's master and worker processes; each worker
serves through ``WorkerIO`` here, waitress's listeners, connections, task
threads and I/O loop. waitress documents its settings (``Adjustments``) and its
WSGI environ, not the classes this module subclasses or reads. Each internal
relied on is pinned by the test of tests/test_waitress_internals.py named after
it, so that a waitress release that changes one fails there first
(pyproject.toml keeps waitress below 4 meanwhile).

The parser (``HTTPRequestParser``, subclassed by ``PlacementParser``):

- the state it reads and sets to refuse at once: ``completed``,
  ``headers_finished``, ``error``, ``body_rcv``, ``header_plus``,
  ``expect_continue``, ``headers``, ``version``, ``chunked``, ``adj``:
  test_parser_state_attributes
- ``received()`` returns the bytes it consumed:
  test_parser_received_returns_bytes_consumed
- ``parse_header()`` takes a request line alone (``_refuse``):
  test_parser_parse_header_takes_the_request_line_alone
- a ``ParsingError`` raised in ``parse_header()`` becomes a 400:
  test_parser_parse_header_parsing_error_is_a_bad_request
- header names upper case with underscores (``CONTENT_LENGTH``,
  ``TRANSFER_ENCODING``): test_parser_headers_are_upper_case_with_underscores
- the words of its refusal of an invalid Content-Length (``_refusal_detail``):
  test_parser_invalid_content_length_reason
- ``RequestHeaderFieldsTooLarge`` and ``RequestEntityTooLarge`` for its size
  refusals: test_parser_size_error_classes
- ``body_rcv`` a ``ChunkedReceiver`` for a chunked body:
  test_parser_body_rcv_is_a_chunked_receiver
- the receiver's ``__len__``, ``chunk_remainder``, ``control_line``, ``trailer``:
  test_chunked_receiver_counts_and_remainder
- ``waitress.utilities.find_double_newline`` (``_bare_lf``): test_find_double_newline

The channel (``HTTPChannel``, subclassed by ``PlacementChannel``):

- ``task_class``, ``error_task_class``, ``parser_class``: test_channel_class_attributes
- ``request`` and ``requests`` (``_overdue``): test_channel_request_state
- ``creation_time`` and ``last_activity``: test_channel_times
- ``total_outbufs_len`` and ``outbuf_lock`` (``_wait_for_budget``):
  test_channel_outbufs_len_and_lock
- ``_map``, the worker's socket map (``buffered_answers``):
  test_channel_map_holds_every_channel
- ``connected``, ``will_close``, ``handle_close()`` and ``socket`` (``cut_off``):
  test_channel_close_flags
- ``handle_close()`` frees the buffered answer and wakes a waiting writer:
  test_channel_handle_close_frees_outbufs_and_notifies
- ``addr``, ``server`` and ``adj``: test_channel_addr_server_and_adj
- ``adj.send_bytes``: test_adjustments_send_bytes_is_read
- ``received()`` sends 100 Continue as the parser's ``expect_continue`` says:
  test_channel_received_sends_continue_as_the_parser_says
- ``service()`` runs the task classes, which write through ``write_soon()``:
  test_channel_service_runs_the_task_classes_through_write_soon
- ``readable()`` and ``writable()``, asked by the loop:
  test_channel_readable_and_writable_asked_by_the_loop

The tasks (``ErrorTask`` and ``WSGITask``, subclassed by ``PlacementErrorTask``
and ``PlacementTask``):

- the error's ``code``, ``reason`` and ``body``: test_error_task_interface
- ``execute()`` setting ``status``, ``response_headers``, ``content_length``,
  ``set_close_on_finish()`` and ``write()``:
  test_error_task_execute_writes_status_headers_and_body
- ``get_environment()`` (it folds leading slashes), ``request.path`` and
  ``channel.server.adj.url_prefix``: test_wsgi_task_get_environment
- ``write()`` writing the head and the body apart, and what ``PlacementTask.write``
  reads and sets to write them together (``wrote_header``, ``complete``,
  ``has_body``, ``chunked_response``, ``content_length``,
  ``content_bytes_written``, ``build_response_header()``):
  test_wsgi_task_writes_head_and_body_apart, test_placement_task_sends_them_together

The listener (``TcpWSGIServer``, subclassed by ``PlacementServer``):

- ``channel_class`` and its constructor on a socket gunicorn bound:
  test_server_channel_class_and_constructor_with_a_bound_socket
- ``active_channels`` and ``maintenance()``: test_server_active_channels_and_maintenance
- ``readable()`` runs maintenance and applies ``connection_limit``:
  test_server_readable_runs_maintenance_and_connection_limit
- ``handle_accept()`` called by the loop: test_server_handle_accept_is_called_by_the_loop
- ``accept()``, ``set_socket_options()``, ``fix_addr()``: test_server_accept_helpers
- ``accepting``, ``del_channel()``, ``trigger`` (``WorkerIO``):
  test_server_stop_attributes

The dispatcher (``ThreadedTaskDispatcher``, subclassed by ``PlacementDispatcher``)
and the loop:

- ``lock``, ``active_count``, ``queue``, ``set_thread_count()`` and ``shutdown()``:
  test_dispatcher_counts
- ``add_task()``'s work (``queue``, ``queue_cv``) and its count of idle threads
  (``threads``, ``stop_count``, ``active_count``):
  test_dispatcher_add_task_and_idle_count
- the listener's ``task_dispatcher`` (``PlacementChannel.service``):
  test_server_task_dispatcher_is_the_one_given

The loop (``ChannelPoller``, in place of ``wasyncore.loop``):

- a channel's service, and a write it cannot send whole, wake the loop through
  the server's ``pull_trigger()``: test_channel_wakes_the_loop_through_the_server
- ``add_channel()`` sets ``map[fd]``, ``del_channel()`` deletes it, ``_fileno``:
  test_wasyncore_channels_come_and_go_through_the_map_items
- ``wasyncore.readwrite(obj, flags)`` with poll's flags, which epoll's equal:
  test_wasyncore_readwrite_takes_poll_flags
- ``wasyncore.loop(timeout, map, use_poll, count)``: test_wasyncore_loop_takes_count
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

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
from allotment.http.environ import new_request_id
from allotment.http.errors import error_body

# The HTTP layer's log lines keep the logger they have always had: operators
# filter on its name.
LOG = logging.getLogger("allotment.server")


class Limits(Protocol):
    """What a client may cost a worker: ``allotment.server.ConnectionLimits``, which
    the server reads from placement.conf (named by its shape here: importing the
    server would make a cycle)."""

    @property
    def request_timeout(self) -> float: ...
    @property
    def keepalive_timeout(self) -> float: ...
    @property
    def max_request_header_size(self) -> int: ...
    @property
    def max_request_body_size(self) -> int: ...
    @property
    def connection_limit(self) -> int: ...


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
    """waitress's WSGI call, with the path as the client sent it, and an answer
    in one piece sent with its head.

    waitress folds leading slashes (``//resource_providers`` becomes
    ``/resource_providers``); upstream's servers do not, and it answers 404.
    """

    def get_environment(self) -> dict:
        environ = super().get_environment()
        path = self.request.path
        if path.startswith("//") and not self.channel.server.adj.url_prefix:
            environ["PATH_INFO"] = path
        return environ

    wrote_header: bool

    def write(self, data: bytes) -> None:
        # An answer whose body comes in one piece (every one of ours but the
        # dashboard's files) goes out in one send with its head: waitress
        # writes them apart, and with send_bytes at 1 each is sent at once, a
        # system call and a TCP segment each, on every request.
        if (not self.wrote_header and data and self.complete and self.has_body
                and not self.chunked_response and self.content_length == len(data)):
            head = self.build_response_header()
            self.wrote_header = True
            self.content_bytes_written = len(data)
            self.channel.write_soon(head + data)
            return
        super().write(data)


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

    # When waitress queued the request for a thread (time.monotonic()), and
    # whether it found them all busy (PlacementDispatcher).
    queued_at = 0.0
    found_threads_busy = False

    def service(self) -> None:
        self.served = True
        self.server.task_dispatcher.started(self, time.monotonic())
        _SERVING.channel = self
        try:
            super().service()
        finally:
            _SERVING.channel = None

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
    limits: Limits  # set before the I/O loop runs (WorkerIO does)
    accept_again_at = 0.0  # time.monotonic()
    short_since: float | None = None  # out of descriptors since
    short_warned = float("-inf")

    task_dispatcher: PlacementDispatcher
    # The worker's poller (WorkerIO sets it): told which channel a task thread
    # changed when it wakes the I/O loop.
    poller: ChannelPoller | None = None

    def pull_trigger(self) -> None:
        channel = _SERVING.channel
        if channel is not None and self.poller is not None:
            self.poller.changed.append(channel)
        super().pull_trigger()

    def maintenance(self, now: float) -> None:
        self.task_dispatcher.report_waits(time.monotonic())
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


def _overdue(channel: PlacementChannel, now: float, limits: Limits) -> bool:
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


# How often a worker says how long its requests waited for a thread, and the
# wait from which it says so as a warning (seconds).
WAIT_REPORT_INTERVAL = 60.0
LONG_WAIT = 1.0


class PlacementDispatcher(ThreadedTaskDispatcher):
    """waitress's task threads, with the requests' wait for one summed up.

    waitress warns ("Task queue depth is N") for every request that finds its
    threads busy. Under a steady load that is a large share of requests (19,032
    of a 40,206-line log in a minute at 64 connections, bench/per_call_cpu.py),
    each a formatted line the worker writes when it is busiest, all saying
    that a busy worker is busy. What an operator can act on is how long
    requests waited: counted here, said at most once a ``WAIT_REPORT_INTERVAL``
    (``report_waits``), as a warning once a request waited ``LONG_WAIT``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.reported_at = time.monotonic()
        self._reset_waits()

    def _reset_waits(self) -> None:
        self.served = 0  # requests given a thread since the last report
        self.waited = 0  # of them, those that found every thread busy
        self.longest_wait = 0.0

    def add_task(self, task: PlacementChannel) -> None:
        with self.lock:
            task.queued_at = time.monotonic()
            self.queue.append(task)
            self.queue_cv.notify()
            # waitress's own count of idle threads: a thread just woken is still
            # idle until it takes the lock.
            if len(self.queue) > len(self.threads) - self.stop_count - self.active_count:
                task.found_threads_busy = True

    def started(self, channel: PlacementChannel, now: float) -> None:
        """``channel``'s request has a thread (called on that thread)."""
        wait = now - channel.queued_at
        with self.lock:
            self.served += 1
            if channel.found_threads_busy:
                channel.found_threads_busy = False
                self.waited += 1
            if wait > self.longest_wait:
                self.longest_wait = wait

    def report_waits(self, now: float) -> None:
        """Say how long requests waited for a thread, if it is time and any did."""
        if now - self.reported_at < WAIT_REPORT_INTERVAL:
            return
        with self.lock:
            served, waited, longest = self.served, self.waited, self.longest_wait
            self._reset_waits()
        interval, self.reported_at = now - self.reported_at, now
        if not waited:
            return
        LOG.log(logging.WARNING if longest >= LONG_WAIT else logging.INFO,
                "%d of %d requests in the last %.0f s found this worker's %d application "
                "threads all busy; the longest wait for one was %.3f s", waited, served,
                interval, len(self.threads), longest)


def adjustments_for(limits: Limits, threads: int, backlog: int,
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


# The channel whose request this task thread is serving (PlacementChannel.service).
class _Serving(threading.local):
    # A class default: an attribute set on the instance at import would exist
    # only for the importing thread.
    channel: PlacementChannel | None = None


_SERVING = _Serving()

# How often every connection's interest is looked at again, whether or not
# anything said it changed (seconds): a safety net, not the mechanism.
FULL_REVIEW_INTERVAL = 1.0

_READ = select.POLLIN | select.POLLPRI


class SocketMap(dict):
    """The worker's socket map (fd to dispatcher), noting the fds that came and went."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: deque[int] = deque()

    def __setitem__(self, fd: int, obj: object) -> None:
        super().__setitem__(fd, obj)
        self.changes.append(fd)

    def __delitem__(self, fd: int) -> None:
        super().__delitem__(fd)
        self.changes.append(fd)


class ChannelPoller:
    """The worker's I/O loop over a standing epoll set.

    waitress's own loop builds a new poll set every pass, asking every
    connection whether it wants to read or write: with many idle keep-alive
    connections (a large cloud's compute nodes, each polling once a minute)
    that is most of a request's cost. 1,000 idle connections took a provider's
    traits from 0.87-0.96 ms of CPU per call to 1.26-1.39 ms (PostgreSQL, 2
    workers). Here each pass asks only what may have changed: connections
    that came, went or had events, those a task thread changed (it always
    wakes the loop after, ``PlacementServer.pull_trigger``), and the
    listeners and wake-up pipe, whose ``readable()`` runs the maintenance.
    Every connection is asked again once a ``FULL_REVIEW_INTERVAL``.
    """

    def __init__(self, socket_map: SocketMap) -> None:
        self.map = socket_map
        self.epoll = select.epoll()
        self.registered: dict[int, tuple[object, int]] = {}  # fd: (dispatcher, events)
        self.changed: deque[HTTPChannel] = deque()  # appended by task threads
        self.others: dict[int, object] = {}  # listeners and wake-up pipes, asked every pass
        self.reviewed_at = float("-inf")

    def close(self) -> None:
        self.epoll.close()

    def _review(self, fd: int, obj: wasyncore.dispatcher) -> None:
        events = 0
        if obj.readable():
            events |= _READ
        # A listening socket is never asked to write (as waitress's loop).
        if obj.writable() and not obj.accepting:
            events |= select.POLLOUT
        entry = self.registered.get(fd)
        if entry is not None and entry[0] is not obj:
            # The fd's earlier socket was closed (the kernel forgot it) and
            # the number taken again.
            self._forget(fd)
            entry = None
        if entry is not None and entry[1] == events:
            return
        try:
            if not events:
                self._forget(fd)
            elif entry is None:
                self.epoll.register(fd, events)
                self.registered[fd] = (obj, events)
            else:
                self.epoll.modify(fd, events)
                self.registered[fd] = (obj, events)
        except OSError:
            # Closed under us: what waitress's loop does for a bad fd.
            self._forget(fd)
            wasyncore.readwrite(obj, select.POLLNVAL)

    def _forget(self, fd: int) -> None:
        if self.registered.pop(fd, None) is not None:
            # Closed already, the kernel has dropped it.
            with contextlib.suppress(OSError):
                self.epoll.unregister(fd)

    def poll(self, timeout: float) -> None:
        """One pass: waits at most ``timeout`` seconds for a socket, then serves them."""
        socket_map = self.map
        while socket_map.changes:
            fd = socket_map.changes.popleft()
            obj = socket_map.get(fd)
            if obj is None:
                self._forget(fd)
                self.others.pop(fd, None)
                continue
            if not isinstance(obj, HTTPChannel):
                self.others[fd] = obj
            self._review(fd, obj)
        now = time.monotonic()
        if now - self.reviewed_at >= FULL_REVIEW_INTERVAL:
            self.reviewed_at = now
            self.changed.clear()
            for fd, obj in list(socket_map.items()):
                self._review(fd, obj)
        else:
            while self.changed:
                channel = self.changed.popleft()
                fd = channel._fileno
                if fd is not None and socket_map.get(fd) is channel:
                    self._review(fd, channel)
            for fd, obj in list(self.others.items()):
                if socket_map.get(fd) is obj:
                    self._review(fd, obj)
        try:
            ready = self.epoll.poll(timeout)
        except InterruptedError:
            return
        for fd, events in ready:
            obj = socket_map.get(fd)
            if obj is None:
                continue
            wasyncore.readwrite(obj, events)
            if socket_map.get(fd) is obj:
                self._review(fd, obj)


class WorkerIO:
    """A worker's waitress: its listeners, their connections, the task threads
    and the I/O loop that serves them, stepped by the gunicorn worker."""

    def __init__(self, app: Callable, sockets: list[socket.socket], limits: Limits,
                 threads: int, backlog: int) -> None:
        adjustments = adjustments_for(limits, threads=threads, backlog=backlog,
                                      sockets=sockets)
        self.socket_map = SocketMap()
        # epoll is Linux's: elsewhere (a developer's laptop) waitress's own loop.
        self.poller = ChannelPoller(self.socket_map) if hasattr(select, "epoll") else None
        self.dispatcher = PlacementDispatcher()
        self.dispatcher.set_thread_count(adjustments.threads)
        self.servers: list[PlacementServer] = []
        for sock in adjustments.sockets:
            server = PlacementServer(
                app, self.socket_map, True, sock, dispatcher=self.dispatcher,
                adj=adjustments, bind_socket=False,
                sockinfo=(sock.family, sock.type, sock.proto, sock.getsockname()))
            server.limits = limits
            server.poller = self.poller
            self.servers.append(server)

    def poll(self, timeout: float) -> None:
        """One pass of the I/O loop: waits at most ``timeout`` seconds for a socket."""
        if self.poller is None:
            wasyncore.loop(timeout=timeout, map=self.socket_map, use_poll=True, count=1)
        else:
            self.poller.poll(timeout)

    def stop_accepting(self) -> None:
        """Close the listeners; the connections open are still served."""
        for server in self.servers:
            server.accepting = False
            server.del_channel()
            server.socket.close()

    def busy(self) -> bool:
        """Whether an answer is being made or a request waits for a thread."""
        return _tasks_running(self.dispatcher) or any(
            channel.requests for server in self.servers
            for channel in server.active_channels.values())

    def close(self) -> None:
        """End the task threads, then close every connection and wake-up pipe."""
        # The task threads end before the trigger closes: a task that has just
        # answered still pulls the trigger (its channel's requests are already
        # empty by then), and a closed trigger made that an EBADF traceback.
        self.dispatcher.shutdown(cancel_pending=True, timeout=1)
        for server in self.servers:
            for channel in list(server.active_channels.values()):
                channel.close()
            server.trigger.close()
        if self.poller is not None:
            self.poller.close()


def _tasks_running(dispatcher: ThreadedTaskDispatcher) -> bool:
    """Whether a task thread is busy or a task waits for one (waitress's own counts)."""
    with dispatcher.lock:
        return bool(dispatcher.active_count or dispatcher.queue)
