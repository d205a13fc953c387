"""Reading the change log (migration 0003) incrementally, without missing a commit.

Triggers append one row per changed row of the tables the candidates read:
``(id, kind, ref)``, ``ref`` being the provider (or name) id. A reader keeps
a ``Position`` and, at the start of every candidates request, asks for what
it has not seen. The ids come from a sequence, so a plain ``id > high``
would miss a change whose id was taken *before* ``high`` but that committed
*after* the reader saw ``high`` (the commit-order gap), and rolled-back
transactions leave ids that never appear. Each backend closes it its own way:

* **PostgreSQL** -- every row carries its transaction's id. One statement
  reads the new rows together with the statement's own snapshot; the
  snapshot's in-progress transaction ids (``xip``) and its ``xmax`` are
  kept, and the next poll asks for ``id > high OR xid IN (those) OR xid >=
  xmax``. A change not yet visible was written by a transaction in progress
  at that snapshot or by one that began writing after it (then its id,
  taken later from the sequence, is above ``high``). A transaction in
  progress is in ``xip`` only if its xid is below ``xmax``: PostgreSQL
  leaves out running xids above the highest completed one, so a
  transaction that took a lower change id than one already committed may
  be known only by ``xid >= xmax``. Rolled-back transactions simply leave
  ``xip`` and fall below later ``xmax``. Nothing is timed.
* **MySQL / MariaDB** -- ids missing below ``high`` are kept as *gaps* and
  asked for again by id. A gap older than a second is probed with a locking
  read that does not wait (``LOCK IN SHARE MODE NOWAIT`` under READ
  COMMITTED, so no gap locks): an uncommitted insert holds its row's lock,
  so "lock held" means in flight (keep asking), and "no row, no lock" means
  rolled back (forget it). The probe runs in a transaction of its own
  (``probing``) when the poll reads in one snapshot (REPEATABLE READ), where
  a locking read would take gap locks that make writers wait.
  On a **Galera** cluster another node's transaction in flight holds no
  lock on this node, so there a gap is forgotten only after
  ``GALERA_GAP_SETTLE`` seconds. A change whose transaction stays open longer
  than that (a slow writer on another node) would then be missed; so, every
  ``GALERA_GAP_SETTLE`` seconds, the poll also reads every provider's
  generation and names the providers whose generation moved since the last
  such sweep (or the full load). Every write a Placement API makes to a
  provider's inventories, allocations or traits moves its generation in the
  same transaction, so such a change is seen within that time of its commit.
  What moves no generation (aggregates written at microversion 1.18, SQL
  written by hand) and stays open that long is seen at the next comparison
  with the tables (``model``).
* **SQLite** -- one writer at a time and AUTOINCREMENT: ids commit in order.

When the log cannot answer -- the reader has not polled for half the
retention (rows may be trimmed), a gap or a transaction has stayed pending
that long, or too many gaps are pending -- ``poll`` raises ``Rebuild`` and
the reader loads everything again (``model``). Rows older than
``retention`` seconds are trimmed by ``trim``.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from allotment.db import tables as t
from allotment.db.errors import LockNotGranted, meaning

CHANGES = sa.table("allotment_changes", sa.column("id", sa.BigInteger),
                   sa.column("kind", sa.SmallInteger), sa.column("ref", sa.Integer),
                   sa.column("xid", sa.BigInteger), sa.column("created_at", sa.DateTime))

# A gap is probed once it is this old (an id is taken and its row written in
# the same statement: a second is ages for that).
GAP_SETTLE = 1.0
# On Galera: how long a gap is waited for (see the module docstring).
GALERA_GAP_SETTLE = 10.0
# More pending gaps than this: load everything again rather than track them.
MAX_GAPS = 10000
# Ids below the high mark examined for gaps at a full load (MySQL).
START_WINDOW = 1000


# The largest id and transaction id the log's BIGINT columns hold.
_LARGEST = 2**63 - 1

# Opens a transaction (``Database.read``), for the probe.
Opener = Callable[[], AbstractContextManager[sa.Connection]]


class Kind(enum.IntEnum):
    """What a change row names (kept in step with migration 0003's KINDS)."""

    PROVIDER = 1
    INVENTORY = 2
    ALLOCATION = 3
    PROVIDER_TRAIT = 4
    PROVIDER_AGGREGATE = 5
    TRAIT = 6
    RESOURCE_CLASS = 7
    AGGREGATE = 8


class Rebuild(Exception):
    """The change log cannot bring this reader up to date: load everything."""


@dataclass
class Position:
    """How far a reader has read the change log."""

    high: int = 0
    # MySQL: ids below ``high`` not seen yet -> when first missed (monotonic).
    gaps: dict[int, float] = field(default_factory=dict)
    # PostgreSQL: transactions in progress at the last poll -> first seen, and
    # that snapshot's xmax (running xids at or above it are not in its xip).
    xids: dict[int, float] = field(default_factory=dict)
    xmax: int | None = None
    polled_at: float = field(default_factory=time.monotonic)
    # Galera: every provider's generation at the last sweep (provider id ->
    # generation), and when it was read.
    generations: dict[int, int] | None = None
    swept_at: float = 0.0


Changes = dict[Kind, set[int]]


def _group(rows: Iterable[tuple[int, int]]) -> Changes:
    changes: Changes = {}
    for kind, ref in rows:
        changes.setdefault(Kind(kind), set()).add(ref)
    return changes


class Feed:
    """The change log of one database, as its dialect must read it."""

    def __init__(self, dialect: str, retention: float) -> None:
        self.dialect = dialect
        self.retention = retention
        self.galera: bool | None = None  # MySQL: learnt at the first ``start``

    # --- positions -------------------------------------------------------

    def start(self, conn: sa.Connection) -> Position:
        """Where a full load that follows in ``conn`` (or later) starts from.

        Taken *before* the tables are read: a change committed in between is
        then both in the load and in the next poll, and applying it twice is
        harmless (changes are re-read, never replayed).
        """
        if self.dialect == "postgresql":
            high, snapshot = conn.execute(sa.text(
                "SELECT COALESCE(MAX(id), 0), pg_current_snapshot()::text "
                "FROM allotment_changes")).one()
            now = time.monotonic()
            return Position(high=high, xids={xid: now for xid in _in_progress(snapshot)},
                            xmax=_xmax(snapshot))
        high = conn.execute(sa.select(sa.func.coalesce(sa.func.max(CHANGES.c.id), 0))).scalar_one()
        position = Position(high=high)
        if self.dialect == "mysql" and self.galera is None:
            row = conn.execute(sa.text("SHOW VARIABLES LIKE 'wsrep_on'")).first()
            self.galera = row is not None and str(row[1]).upper() == "ON"
        if self.dialect == "mysql" and high:
            low = max(0, high - START_WINDOW)
            seen = set(conn.execute(sa.select(CHANGES.c.id).where(CHANGES.c.id > low)).scalars())
            now = time.monotonic()
            position.gaps = {i: now for i in range(low + 1, high) if i not in seen}
        if self.galera:
            position.generations = _generations(conn)
            position.swept_at = time.monotonic()
        return position

    def poll(self, conn: sa.Connection, position: Position,
             probing: Opener | None = None) -> tuple[Changes, Position]:
        """Changes committed since ``position``, and the position after them.

        ``probing`` opens the READ COMMITTED transaction the MySQL gap probe
        runs in (default: ``conn`` itself).
        """
        now = time.monotonic()
        stale = now - self.retention / 2
        if position.polled_at < stale:
            raise Rebuild("not polled for half the change log's retention")
        if self.dialect == "postgresql":
            return self._poll_postgresql(conn, position, now, stale)
        rows = conn.execute(
            sa.select(CHANGES.c.id, CHANGES.c.kind, CHANGES.c.ref)
            .where(sa.or_(CHANGES.c.id > position.high,
                          CHANGES.c.id.in_(sorted(position.gaps))))).all()
        high = max([position.high, *(row[0] for row in rows)])
        gaps = dict(position.gaps)
        if self.dialect == "mysql":
            seen = {row[0] for row in rows}
            for missing in range(position.high + 1, high):
                if missing not in seen:
                    gaps[missing] = now
            for found in seen:
                gaps.pop(found, None)
            self._settle(conn, probing, gaps, now, stale)
        changes = _group((row[1], row[2]) for row in rows)
        following = Position(high=high, gaps=gaps, polled_at=now,
                             generations=position.generations, swept_at=position.swept_at)
        if (position.generations is not None
                and now - position.swept_at >= GALERA_GAP_SETTLE):
            moved = _moved(position.generations, generations := _generations(conn))
            if moved:
                changes.setdefault(Kind.PROVIDER, set()).update(moved)
            following.generations, following.swept_at = generations, now
        return changes, following

    def _poll_postgresql(self, conn: sa.Connection, position: Position, now: float,
                         stale: float) -> tuple[Changes, Position]:
        snapshot_then = sa.text("SELECT pg_current_snapshot()::text AS snap").columns(
            sa.column("snap", sa.String)).subquery("s")
        # Each open range is closed at the column's largest value, which
        # changes no answer: a planner without statistics prices a one-sided
        # range at a third of the table (a scan of the whole log at every
        # poll) and a closed one as narrow (an index range), as it is.
        unseen = [sa.and_(CHANGES.c.id > position.high, CHANGES.c.id <= _LARGEST),
                  CHANGES.c.xid.in_(sorted(position.xids))]
        if position.xmax is not None:
            unseen.append(sa.and_(CHANGES.c.xid >= position.xmax, CHANGES.c.xid <= _LARGEST))
        rows = conn.execute(
            sa.select(snapshot_then.c.snap, CHANGES.c.id, CHANGES.c.kind, CHANGES.c.ref)
            .select_from(snapshot_then.outerjoin(CHANGES, sa.or_(*unseen)))).all()
        snapshot = rows[0][0]
        found = [(row[1], row[2], row[3]) for row in rows if row[1] is not None]
        in_progress = _in_progress(snapshot)
        for xid, since in position.xids.items():
            # A transaction pending for half the retention may have had its rows
            # trimmed as soon as it committed: when it ends, reload everything.
            if since < stale and xid not in in_progress:
                raise Rebuild(f"transaction {xid} was in progress for half the retention")
        xids = {xid: position.xids.get(xid, now) for xid in in_progress}
        high = max([position.high, *(row[0] for row in found)])
        return (_group((kind, ref) for _, kind, ref in found),
                Position(high=high, xids=xids, xmax=_xmax(snapshot), polled_at=now))

    def _settle(self, conn: sa.Connection, probing: Opener | None, gaps: dict[int, float],
                now: float, stale: float) -> None:
        """Forget gaps whose ids were rolled back (MySQL); see the module docstring."""
        if len(gaps) > MAX_GAPS:
            raise Rebuild(f"{len(gaps)} gaps in the change log")
        settle = GALERA_GAP_SETTLE if self.galera else GAP_SETTLE
        ripe = sorted(gap for gap, since in gaps.items() if since < now - settle)
        if not ripe:
            return
        if gaps[ripe[0]] < stale:
            raise Rebuild(f"change {ripe[0]} has been missing for half the retention")
        if self.galera:
            for gap in ripe:
                del gaps[gap]
            return
        with probing() if probing is not None else nullcontext(conn) as probe_conn:
            for low, high in _runs(ripe):
                self._probe(probe_conn, low, high, gaps)

    def _probe(self, conn: sa.Connection, low: int, high: int, gaps: dict[int, float]) -> None:
        """Forget the ids of ``low..high`` that hold neither a row nor a lock.

        A run with a lock in it is split in halves, down to the ids in flight.
        """
        try:
            present = set(conn.execute(sa.text(
                "SELECT id FROM allotment_changes WHERE id BETWEEN :low AND :high "
                "LOCK IN SHARE MODE NOWAIT"), {"low": low, "high": high}).scalars())
        except OperationalError as exc:
            # A lock held (an uncommitted insert): MySQL 8 answers NOWAIT with
            # its own error, MariaDB with a lock wait timeout.
            if not isinstance(meaning(exc), LockNotGranted):
                raise
            if low < high:  # an insert in flight holds a lock: find which
                middle = (low + high) // 2
                self._probe(conn, low, middle, gaps)
                self._probe(conn, middle + 1, high, gaps)
            return
        # Present rows were committed after this poll read: the next one reads them.
        for gap in range(low, high + 1):
            if gap not in present:
                gaps.pop(gap, None)

    # --- housekeeping ----------------------------------------------------

    def trim(self, conn: sa.Connection) -> int:
        """Delete rows older than the retention; how many went."""
        cutoff = sa.func.current_timestamp() - sa.text(
            f"INTERVAL '{int(self.retention)} seconds'" if self.dialect == "postgresql"
            else f"INTERVAL {int(self.retention)} SECOND")
        if self.dialect == "sqlite":
            cutoff = sa.func.datetime("now", f"-{int(self.retention)} seconds")
        return conn.execute(CHANGES.delete().where(CHANGES.c.created_at < cutoff)).rowcount


_GENERATIONS = sa.select(t.resource_providers.c.id, t.resource_providers.c.generation)


def _generations(conn: sa.Connection) -> dict[int, int]:
    """Every provider's generation (Galera's sweep; see the module docstring)."""
    return {id_: generation for id_, generation in conn.execute(_GENERATIONS)}


def _moved(before: dict[int, int], now: dict[int, int]) -> set[int]:
    """Providers made, deleted or written between two sweeps."""
    moved = {id_ for id_, generation in now.items() if before.get(id_) != generation}
    return moved | (before.keys() - now.keys())


def _in_progress(snapshot: str) -> set[int]:
    """The xip list of a ``pg_snapshot`` text ("xmin:xmax:xip,xip")."""
    xip = snapshot.split(":")[2]
    return {int(x) for x in xip.split(",")} if xip else set()


def _xmax(snapshot: str) -> int:
    """The xmax of a ``pg_snapshot`` text: no xid at or above it had completed."""
    return int(snapshot.split(":")[1])


def _runs(ids: list[int]) -> Iterable[tuple[int, int]]:
    """Consecutive runs of sorted ids, as (first, last)."""
    start = previous = ids[0]
    for i in ids[1:]:
        if i != previous + 1:
            yield start, previous
            start = i
        previous = i
    yield start, previous
