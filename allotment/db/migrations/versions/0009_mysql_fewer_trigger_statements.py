"""MySQL/MariaDB: fewer statements in the allocation triggers of a claim.

MariaDB runs the history and change-log triggers once per allocation row,
and a claim writes three rows (VCPU, MEMORY_MB, DISK_GB) on one provider.
Timed on the claim floor's database (``bench/claim_floor.py``'s schema, one
INSERT of a claim's three rows): the INSERT alone took 0.08 ms, the history
trigger added 0.46 ms, of which 0.17 ms were the second and third rows
looking for an entry of their own transaction to merge with, and the change
log 0.04 ms for three rows naming the same provider.

- **History**: an entry to merge with (the same consumer, provider and class,
  written earlier in the same transaction: a claim's delete of a consumer's
  old rows, then its insert) can only come from an earlier statement, as
  allotment writes each key once per statement. The trigger now records the
  start of the statement that wrote the transaction's first entries
  (``NOW(6)``, constant within a statement and its triggers) and looks for an
  entry only in a later statement. A new instance's claim, whose delete
  found nothing, looks for none; a claim that replaces allocations looks as
  before. Two statements of one transaction that began in the same
  microsecond (none of allotment's: each is a round trip) or an UPDATE that
  swaps two keys of one consumer would leave two entries instead of one
  merged: the same changes, not summed.
- **Change log**: in allotment's transactions (``@allotment_txn`` set), a row
  whose provider is the one the same statement logged last writes no change
  row: the statement's rows commit or roll back together, so the first one
  stands for them. Other writers' rows are logged one by one, as before.

PostgreSQL's triggers run once per statement and SQLite's cost little: only
MySQL/MariaDB change. The history entries and the providers logged are the
same.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import importlib
from types import ModuleType

from alembic import op

from allotment.db import writer as w

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_LOGGED_EVENTS = ("INSERT", "DELETE")


def _migration(name: str) -> ModuleType:
    return importlib.import_module(f"allotment.db.migrations.versions.{name}")


def _replaced(body: str, old: str, new: str) -> str:
    assert old in body, "an earlier migration's trigger changed"
    return body.replace(old, new)


_NAMES = w.MYSQL_HISTORY_NAMES
_CACHED = (("v_type", f"{_NAMES}_type"), ("v_project", f"{_NAMES}_project"),
           ("v_user", f"{_NAMES}_user"), ("v_uuid", f"{_NAMES}_provider"))


def _names_once(row: str, lookup: str) -> str:
    """0008's lookup of ``row``'s names, done once per statement, consumer and
    provider in allotment's transactions (the class's name every time)."""
    key = (f"CONCAT({w.MYSQL_TXN}, '/', NOW(6), '/', {row}.consumer_id, '/', "
           f"{row}.resource_provider_id)")
    taken = ", ".join(f"{local} = {session}" for local, session in _CACHED)
    kept = ", ".join(f"{session} = {local}" for local, session in _CACHED)
    return f"""        IF {w.MYSQL_TXN} IS NOT NULL AND {_NAMES} = {key} THEN
            SET {taken};
            SET v_class = (SELECT name FROM resource_classes
                            WHERE id = {row}.resource_class_id);
        ELSE
    {lookup.replace(chr(10) + "  ", chr(10) + "      ").rstrip()}
            SET {_NAMES} = {key}, {kept};
        END IF;
"""


def _history_body(body: str) -> str:
    """0008's allocation history trigger, merging only with earlier statements
    and looking names up once per statement, consumer and provider."""
    joined = _migration("0008_mysql_history_one_lookup")
    for row in ("NEW", "OLD"):
        _old, lookup = joined._allocation_lookups(row)
        if lookup in body:
            body = body.replace(lookup, _names_once(row, lookup))
    body = _replaced(
        body,
        f"IF {w.MYSQL_TXN} IS NOT NULL AND {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN} THEN",
        f"IF {w.MYSQL_TXN} IS NOT NULL AND {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN}\n"
        f"       AND NOT ({w.MYSQL_HISTORY_FIRST} <=> NOW(6)) THEN")
    return _replaced(
        body,
        f"    SET {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN};",
        f"    IF NOT ({w.MYSQL_HISTORY_SEEN} <=> {w.MYSQL_TXN}) THEN\n"
        f"        SET {w.MYSQL_HISTORY_FIRST} = NOW(6);\n"
        f"    END IF;\n"
        f"    SET {w.MYSQL_HISTORY_SEEN} = {w.MYSQL_TXN};")


def _log_body(event: str) -> str:
    """The change log's row for an allocation, once per provider and statement
    in allotment's transactions."""
    row = "NEW" if event == "INSERT" else "OLD"
    log = _migration("0003_change_log")
    kind, _column = log.KINDS["allocations"]
    key = f"CONCAT({w.MYSQL_TXN}, '/', NOW(6), '/', {row}.resource_provider_id)"
    return (f"BEGIN IF {w.MYSQL_TXN} IS NULL OR NOT ({w.MYSQL_LOG_LAST} <=> {key}) THEN "
            f"INSERT INTO {log.TABLE} (kind, ref) VALUES ({kind}, {row}.resource_provider_id); "
            f"SET {w.MYSQL_LOG_LAST} = {key}; END IF; END")


def _replace(fewer: bool) -> None:
    if op.get_bind().dialect.name != "mysql":
        return
    history = _migration("0005_history")
    joined = _migration("0008_mysql_history_one_lookup")
    lookups = [joined._allocation_lookups("NEW"), joined._allocation_lookups("OLD")]
    for event, body in history._mysql_allocation_triggers().items():
        body = joined._joined(body, [pair for pair in lookups if pair[0] in body])
        if fewer:
            body = _history_body(body)
        op.execute(f"DROP TRIGGER IF EXISTS allotment_history_allocations_{event}")
        op.execute(f"CREATE TRIGGER allotment_history_allocations_{event} AFTER {event} "
                   f"ON allocations FOR EACH ROW BEGIN{history._MYSQL_DECLARE}{body}\nEND")
    log = _migration("0003_change_log")
    kind, column = log.KINDS["allocations"]
    before = log._bodies(kind, column, sqlite=False, watched=None)
    for event in _LOGGED_EVENTS:
        body = _log_body(event) if fewer else before[event.lower()]
        # The change log's trigger ran before the history's (0003 came before
        # 0005): PRECEDES keeps that order.
        op.execute(f"DROP TRIGGER IF EXISTS allotment_log_allocations_{event}")
        op.execute(f"CREATE TRIGGER allotment_log_allocations_{event} AFTER {event} "
                   f"ON allocations FOR EACH ROW PRECEDES allotment_history_allocations_{event} "
                   f"{body}")


def upgrade() -> None:
    _replace(fewer=True)


def downgrade() -> None:
    _replace(fewer=False)
