"""Synchronise the standard resource classes and traits into the database.

Standard resource classes keep upstream's ids (their index in
``os_resource_classes.STANDARDS``); standard traits get ordinary ids. The
sync is idempotent and tolerates several workers running it at once: a
unique-key collision means another process won, and the sync re-reads.
"""

from __future__ import annotations

import datetime

import os_resource_classes as orc
import os_traits
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from allotment.db.engine import write_transaction
from allotment.db.tables import resource_classes, traits


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def sync(engine: Engine, attempts: int = 5) -> None:
    for attempt in range(attempts):
        try:
            with write_transaction(engine) as conn:
                _sync_classes(conn)
                _sync_traits(conn)
            return
        except IntegrityError:  # noqa: PERF203 - a retry loop: the try is the point
            if attempt == attempts - 1:
                raise


def _sync_classes(conn: sa.Connection) -> None:
    existing = {row.name for row in conn.execute(sa.select(resource_classes.c.name))}
    missing = [
        {"id": index, "name": name, "created_at": _now()}
        for index, name in enumerate(orc.STANDARDS)
        if name not in existing
    ]
    if not missing:
        return
    if conn.dialect.name == "mysql":
        # VCPU has id 0: MySQL would otherwise read 0 as "next auto value".
        conn.exec_driver_sql(
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_AUTO_VALUE_ON_ZERO')")
    conn.execute(resource_classes.insert(), missing)


def _sync_traits(conn: sa.Connection) -> None:
    existing = {row.name for row in conn.execute(sa.select(traits.c.name))}
    missing = [
        {"name": name, "created_at": _now()}
        for name in os_traits.get_traits()
        if name not in existing
    ]
    if missing:
        conn.execute(traits.insert(), missing)
