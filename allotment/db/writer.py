"""Who is writing: the context allotment gives each of its write transactions.

The history triggers (migration 0005) record every change to allocations and
inventories, whoever makes it. A change made in one of allotment's write
transactions carries the request's ids and the writer ``allotment``; any
other (upstream Placement serving the same database, an operator's SQL) is
recorded as ``outside``, without ids. The triggers read the context from:

- PostgreSQL: transaction-local settings (``set_config(..., true)``), gone
  at commit or rollback;
- MySQL/MariaDB: session variables, set again at the start of every write
  transaction of allotment's (its pooled connections serve nobody else);
- SQLite: a one-row table, filled after ``BEGIN IMMEDIATE`` and emptied
  before the commit (writers take turns, so no other writer ever sees it).

Changes one transaction makes to the same (consumer, provider, class) --
a claim deletes a consumer's old rows and inserts new ones -- are merged into
one history entry: by transaction id on PostgreSQL, by a random token allotment
draws per transaction elsewhere (there, two statements of an outside writer
stay two entries).

The request's ids travel as arguments from the handler (its
``RequestContext.ids``) through ``retry.run_write`` and ``Database.write`` to
``WriteContext.begin``, the statement that stamps them: nothing on the way
reads a thread-local.

The migration imports this module: it holds constants and the one function
that sets the context, nothing that imports the rest of allotment.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa

WRITER_ALLOTMENT = "allotment"
WRITER_OUTSIDE = "outside"

# PostgreSQL: custom settings (a dotted name needs no declaration).
PG_WRITER = "allotment.writer"
PG_REQUEST_ID = "allotment.request_id"
PG_GLOBAL_REQUEST_ID = "allotment.global_request_id"
# Set by the history triggers themselves: the transaction already wrote entries.
PG_HISTORY_SEEN = "allotment.history_seen"

# MySQL/MariaDB: session variables.
MYSQL_WRITER = "@allotment_writer"
MYSQL_TXN = "@allotment_txn"
MYSQL_REQUEST_ID = "@allotment_request_id"
MYSQL_GLOBAL_REQUEST_ID = "@allotment_global_request_id"
# Set by the history triggers themselves: the token of the transaction that
# last wrote entries in this session.
MYSQL_HISTORY_SEEN = "@allotment_history_seen"
# Set by them too (migration 0009): the start (NOW(6)) of the statement that
# wrote that transaction's first entries.
MYSQL_HISTORY_FIRST = "@allotment_history_first"
# Set by them too (migration 0009): the transaction, statement, consumer and
# provider whose names an allocation entry looked up last, and those names
# (``MYSQL_HISTORY_NAMES`` followed by ``_type``, ``_project``, ``_user``,
# ``_provider``).
MYSQL_HISTORY_NAMES = "@allotment_history_names"
# Set by the change log's allocation triggers (migration 0009): the
# transaction, statement and provider whose change row was written last.
MYSQL_LOG_LAST = "@allotment_log_last"

# SQLite: the context table (one row, id 1, only inside our transactions).
SQLITE_CONTEXT = "allotment_write_context"

# PostgreSQL: the execution option of a write Connection whose BEGIN carries
# its context (``pg_context_statement``), one round trip for both; holds the
# request's ids.
PG_CONTEXT_AT_BEGIN = "allotment_context_at_begin"

_PG_SET = sa.text(
    f"SELECT set_config('{PG_WRITER}', '{WRITER_ALLOTMENT}', true), "
    f"set_config('{PG_REQUEST_ID}', :request_id, true), "
    f"set_config('{PG_GLOBAL_REQUEST_ID}', :global_request_id, true)")
_MYSQL_SET = sa.text(
    f"SET {MYSQL_WRITER} = '{WRITER_ALLOTMENT}', {MYSQL_TXN} = :txn, "
    f"{MYSQL_REQUEST_ID} = :request_id, {MYSQL_GLOBAL_REQUEST_ID} = :global_request_id")
_SQLITE_SET = sa.text(
    f"INSERT OR REPLACE INTO {SQLITE_CONTEXT} (id, txn, request_id, global_request_id) "
    "VALUES (1, :txn, :request_id, :global_request_id)")
_SQLITE_CLEAR = sa.text(f"DELETE FROM {SQLITE_CONTEXT}")
_SQLITE_HAS_CONTEXT = sa.text(
    f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{SQLITE_CONTEXT}'")


@dataclass(frozen=True)
class RequestIds:
    """The ids a write transaction's history entries carry: the request's own
    and the caller's (nova's) global one; None for a write no request made
    (the history's and the change log's trimming)."""

    request_id: str | None = None
    global_request_id: str | None = None


NO_REQUEST = RequestIds()


def pg_context_statement(ids: RequestIds, literal: Callable[[str], str]) -> str:
    """The PostgreSQL context as one statement with its values written in
    (quoted by ``literal``, the driver's), to be sent with the transaction's
    BEGIN: a statement with parameters must travel alone."""
    return (f"SELECT set_config('{PG_WRITER}', '{WRITER_ALLOTMENT}', true), "
            f"set_config('{PG_REQUEST_ID}', {literal(ids.request_id or '')}, true), "
            f"set_config('{PG_GLOBAL_REQUEST_ID}', {literal(ids.global_request_id or '')}, true)")


class WriteContext:
    """Marks a database's write transactions as allotment's (one per Database)."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        # PostgreSQL: the context goes in the BEGIN's round trip
        # (``PG_CONTEXT_AT_BEGIN``), sent by the engine.
        self.with_begin = dialect == "postgresql"
        # SQLite: the table exists from migration 0005 on; checked until found.
        self._sqlite_ready = False

    def begin(self, conn: sa.Connection, ids: RequestIds = NO_REQUEST) -> None:
        """First statement of a write transaction: who writes, for which request."""
        request_id, global_request_id = ids.request_id, ids.global_request_id
        if self.dialect == "postgresql":
            if conn.get_execution_options().get(PG_CONTEXT_AT_BEGIN) is not None:
                return  # sent with the BEGIN (allotment.db.engine)
            conn.execute(_PG_SET, {"request_id": request_id or "",
                                   "global_request_id": global_request_id or ""})
        elif self.dialect == "mysql":
            conn.execute(_MYSQL_SET, {"txn": secrets.randbits(62), "request_id": request_id,
                                      "global_request_id": global_request_id})
        elif self.dialect == "sqlite" and self._sqlite_has_context(conn):
            conn.execute(_SQLITE_SET, {"txn": secrets.randbits(62), "request_id": request_id,
                                       "global_request_id": global_request_id})

    def end(self, conn: sa.Connection) -> None:
        """Last statement before the commit (SQLite only: the row must not outlive us)."""
        if self.dialect == "sqlite" and self._sqlite_ready:
            conn.execute(_SQLITE_CLEAR)

    def _sqlite_has_context(self, conn: sa.Connection) -> bool:
        if not self._sqlite_ready:
            self._sqlite_ready = conn.execute(_SQLITE_HAS_CONTEXT).first() is not None
        return self._sqlite_ready
