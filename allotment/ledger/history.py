"""History: what the database recorded about allocations and inventories.

The rows are written by the database's own triggers (migration 0005), for
every writer; this module reads them, newest first, and trims them by age.
An entry's ``writer`` is ``allotment`` (with the request's ids) or
``outside`` (any other: upstream Placement, an operator's SQL).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from allotment.db import tables as t
from allotment.db.engine import Database

LOG = logging.getLogger(__name__)

_AH = t.allocation_history
_IH = t.inventory_history


@dataclass(frozen=True)
class AllocationChange:
    """One (consumer, provider, class) as one transaction changed it."""

    id: int
    at: datetime.datetime
    consumer_uuid: str
    consumer_type: str | None
    project_id: str | None
    user_id: str | None
    resource_provider_uuid: str | None
    resource_class: str | None
    used_before: int
    used_after: int
    request_id: str | None
    global_request_id: str | None
    writer: str


@dataclass(frozen=True)
class InventoryChange:
    """One (provider, class) inventory as one transaction changed it.

    ``total_before`` None: the inventory was created; ``total_after`` None:
    deleted. ``min_unit``, ``max_unit`` and ``step_size`` are the last values.
    """

    id: int
    at: datetime.datetime
    resource_provider_uuid: str | None
    resource_provider_generation: int | None
    resource_class: str | None
    total_before: int | None
    total_after: int | None
    reserved_before: int | None
    reserved_after: int | None
    allocation_ratio_before: float | None
    allocation_ratio_after: float | None
    min_unit: int | None
    max_unit: int | None
    step_size: int | None
    request_id: str | None
    global_request_id: str | None
    writer: str


@dataclass(frozen=True)
class Page:
    """Entries newest first; ``next_marker`` is set when older ones remain."""

    entries: list[Any]
    next_marker: int | None


@dataclass(frozen=True)
class Window:
    """Which entries: by time (``since`` inclusive, ``until`` exclusive, naive
    UTC) and by position (ids below ``marker``), at most ``limit``."""

    limit: int
    marker: int | None = None
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None


_ALLOCATION_FIELDS = [_AH.c[name] for name in (
    "id", "created_at", "consumer_uuid", "consumer_type", "project_id", "user_id",
    "resource_provider_uuid", "resource_class", "used_before", "used_after", "request_id",
    "global_request_id", "writer")]
_INVENTORY_FIELDS = [_IH.c[name] for name in (
    "id", "created_at", "resource_provider_uuid", "resource_provider_generation",
    "resource_class", "total_before", "total_after", "reserved_before", "reserved_after",
    "allocation_ratio_before", "allocation_ratio_after", "min_unit", "max_unit",
    "step_size", "request_id", "global_request_id", "writer")]


def _windowed(conn: sa.Connection, table: sa.Table, select: sa.Select, window: Window,
              by: tuple[sa.Column[Any], str] | None = None) -> sa.Select:
    """``select``'s entries in ``window``, newest first. ``by``: a column
    whose index is (column, id) and the value it must equal.

    Ordered by (column, id), only that index gives the order and the read
    stops after the window's entries whatever the statistics say. Ordered
    by id alone, PostgreSQL with statistics walked the primary key back,
    filtering, betting that a project's entries are evenly spread: for a
    project with few or old entries that is the whole table. On PostgreSQL
    the equality is ``= ANY(ARRAY[value])``: a plain one makes the column a
    constant to the planner, which drops it from the order, and the primary
    key gives the order again."""
    order = [table.c.id.desc()]
    if by is not None:
        column, value = by
        select = select.where(column == sa.any_(postgresql.array([value]))
                              if conn.dialect.name == "postgresql" else column == value)
        order.insert(0, column.desc())
    if window.marker is not None:
        select = select.where(table.c.id < window.marker)
    if window.since is not None:
        select = select.where(table.c.created_at >= window.since)
    if window.until is not None:
        select = select.where(table.c.created_at < window.until)
    # One more than asked: is there a next page?
    return select.order_by(*order).limit(window.limit + 1)


def _page(rows: Sequence[sa.Row[Any]], window: Window,
          make: Callable[[sa.Row[Any]], Any]) -> Page:
    more = len(rows) > window.limit
    rows = rows[:window.limit]
    return Page([make(row) for row in rows], rows[-1].id if more else None)


def _allocation_change(row: sa.Row[Any]) -> AllocationChange:
    values = row._asdict()
    values["at"] = values.pop("created_at")
    values["used_before"] = int(values["used_before"])
    values["used_after"] = int(values["used_after"])
    return AllocationChange(**values)


def _inventory_change(row: sa.Row[Any]) -> InventoryChange:
    values = row._asdict()
    values["at"] = values.pop("created_at")
    return InventoryChange(**values)


def allocation_changes(conn: sa.Connection, window: Window, *,
                       consumer_uuid: str | None = None,
                       provider_uuid: str | None = None,
                       project_id: str | None = None) -> Page:
    """Allocation changes, newest first, filtered by any of consumer, provider, project."""
    select = sa.select(*_ALLOCATION_FIELDS)
    # Each filter's column leads an index (column, id); the first given orders.
    filters = [(column, value) for column, value in (
        (_AH.c.consumer_uuid, consumer_uuid), (_AH.c.resource_provider_uuid, provider_uuid),
        (_AH.c.project_id, project_id)) if value is not None]
    select = select.where(*(column == value for column, value in filters[1:]))
    rows = conn.execute(_windowed(conn, _AH, select, window,
                                  filters[0] if filters else None)).all()
    return _page(rows, window, _allocation_change)


def inventory_changes(conn: sa.Connection, window: Window, *,
                      provider_uuid: str | None = None) -> Page:
    """Inventory changes, newest first, of one provider or of all."""
    select = sa.select(*_INVENTORY_FIELDS)
    by = None if provider_uuid is None else (_IH.c.resource_provider_uuid, provider_uuid)
    rows = conn.execute(_windowed(conn, _IH, select, window, by)).all()
    return _page(rows, window, _inventory_change)


def latest_for_consumers(conn: sa.Connection, consumer_uuids: Iterable[str],
                         per_consumer: int) -> dict[str, list[AllocationChange]]:
    """The last ``per_consumer`` changes of each consumer (evidence for the audit),
    in one statement per thousand consumers: a window over each one's entries."""
    uuids = list(dict.fromkeys(consumer_uuids))
    found: dict[str, list[AllocationChange]] = {uuid: [] for uuid in uuids}
    for start in range(0, len(uuids), 1000):
        rank = sa.func.row_number().over(partition_by=_AH.c.consumer_uuid,
                                         order_by=_AH.c.id.desc()).label("rank")
        ranked = (sa.select(*_ALLOCATION_FIELDS, rank)
                  .where(_AH.c.consumer_uuid.in_(uuids[start:start + 1000]))
                  .subquery())
        rows = conn.execute(
            sa.select(*[ranked.c[c.name] for c in _ALLOCATION_FIELDS])
            .where(ranked.c.rank <= per_consumer)
            .order_by(ranked.c.consumer_uuid, ranked.c.id.desc())).all()
        for row in rows:
            found[row.consumer_uuid].append(_allocation_change(row))
    return found


def latest_for_provider(conn: sa.Connection, provider_uuid: str, per_kind: int,
                        resource_class: str | None = None
                        ) -> tuple[list[AllocationChange], list[InventoryChange]]:
    """The last allocation and inventory changes on a provider (of one class, if given)."""
    allocations = sa.select(*_ALLOCATION_FIELDS)
    inventories = sa.select(*_INVENTORY_FIELDS)
    if resource_class is not None:
        allocations = allocations.where(_AH.c.resource_class == resource_class)
        inventories = inventories.where(_IH.c.resource_class == resource_class)
    window = Window(limit=per_kind)
    return (_page(conn.execute(_windowed(conn, _AH, allocations, window, (
                _AH.c.resource_provider_uuid, provider_uuid))).all(), window,
                  _allocation_change).entries,
            _page(conn.execute(_windowed(conn, _IH, inventories, window, (
                _IH.c.resource_provider_uuid, provider_uuid))).all(), window,
                  _inventory_change).entries)


def trim(conn: sa.Connection, older_than: datetime.datetime, batch: int) -> int:
    """Delete up to ``batch`` entries of each table recorded before ``older_than``
    (naive UTC), oldest first; how many went. Small batches keep each delete's
    locks short: the caller repeats until nothing is left."""
    removed = 0
    for table in (_AH, _IH):
        ids = conn.execute(sa.select(table.c.id).where(table.c.created_at < older_than)
                           .order_by(table.c.id).limit(batch)).scalars().all()
        if ids:
            removed += conn.execute(table.delete().where(table.c.id.in_(ids))).rowcount
    return removed


# Entries deleted per transaction when trimming.
TRIM_BATCH = 5000


class Retention:
    """Deletes entries older than ``days``, now and then, in a background thread.

    ``due`` is cheap and called after writes; at most every ``interval``
    seconds (the first time ``interval`` after start) it starts one thread,
    which trims in batches of ``TRIM_BATCH`` (one short transaction each)
    until nothing old is left. Every worker does this; concurrent trims
    delete each row once.
    """

    def __init__(self, db: Database, days: int, interval: float = 3600.0) -> None:
        self.db = db
        self.days = days
        self.interval = interval
        self._next = time.monotonic() + interval
        self._lock = threading.Lock()
        self._running: threading.Thread | None = None

    def due(self) -> None:
        if time.monotonic() < self._next:
            return
        with self._lock:
            if time.monotonic() < self._next or self._running is not None:
                return
            self._next = time.monotonic() + self.interval
            self._running = threading.Thread(target=self._trim_in_background,
                                             name="history-trim", daemon=True)
            self._running.start()

    def trim_now(self) -> int:
        """Trim until nothing older than the retention is left; how many entries went."""
        cutoff = (datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
                  - datetime.timedelta(days=self.days))
        removed = 0
        while True:
            with self.db.write() as conn:
                batch = trim(conn, cutoff, TRIM_BATCH)
            removed += batch
            if batch == 0:
                return removed

    def _trim_in_background(self) -> None:
        try:
            removed = self.trim_now()
            LOG.info("History: %d entries older than %d days deleted", removed, self.days)
        except Exception:
            # The next interval tries again; the service goes on meanwhile.
            LOG.exception("History: trimming entries older than %d days failed", self.days)
        finally:
            with self._lock:
                self._running = None
