"""Resource classes: the standard ones (fixed ids) and custom ones (ids >= 10000).

A custom class takes the next id after the largest in the table (never below
10000), as upstream picks them, so both implementations can share a database.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment.db import tables as t
from allotment.ledger.common import is_duplicate, utcnow
from allotment.ledger.errors import (
    ResourceClassExists,
    ResourceClassIdsContended,
    ResourceClassInUse,
    ResourceClassNotFound,
    StandardResourceClass,
)

MIN_CUSTOM_ID = 10000
# Two writers may pick the same next id at once; the loser tries again.
_CREATE_ATTEMPTS = 10


@dataclass(frozen=True)
class ResourceClass:
    id: int
    name: str
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None

    @property
    def is_standard(self) -> bool:
        return self.id < MIN_CUSTOM_ID


_rc = t.resource_classes


def _select() -> sa.Select:
    return sa.select(_rc.c.id, _rc.c.name, _rc.c.created_at, _rc.c.updated_at)


def _to_class(row: sa.Row[Any]) -> ResourceClass:
    return ResourceClass(id=row.id, name=row.name, created_at=row.created_at,
                         updated_at=row.updated_at)


def list_classes(conn: sa.Connection) -> list[ResourceClass]:
    return [_to_class(row) for row in conn.execute(_select().order_by(_rc.c.id))]


def get(conn: sa.Connection, name: str) -> ResourceClass | None:
    row = conn.execute(_select().where(_rc.c.name == name)).first()
    return _to_class(row) if row else None


def require(conn: sa.Connection, name: str) -> ResourceClass:
    found = get(conn, name)
    if found is None:
        raise ResourceClassNotFound(name)
    return found


def create(conn: sa.Connection, name: str) -> ResourceClass:
    """Insert a custom class; ``ResourceClassExists`` when the name is taken."""
    for _attempt in range(_CREATE_ATTEMPTS):
        if get(conn, name) is not None:
            raise ResourceClassExists(name)
        max_id = conn.execute(sa.select(sa.func.max(_rc.c.id))).scalar()
        next_id = max(MIN_CUSTOM_ID, (max_id or 0) + 1)
        try:
            # A savepoint keeps the transaction usable after a lost race.
            with conn.begin_nested():
                conn.execute(_rc.insert().values(id=next_id, name=name, created_at=utcnow()))
        except IntegrityError as exc:
            if is_duplicate(exc):
                continue
            raise
        return require(conn, name)
    raise ResourceClassIdsContended(name)


def ensure(conn: sa.Connection, name: str) -> bool:
    """The class exists afterwards; True when this call created it (1.7+ PUT)."""
    if get(conn, name) is not None:
        return False
    try:
        create(conn, name)
    except ResourceClassExists:
        return False  # Created meanwhile by somebody else: it exists, as asked.
    return True


def rename(conn: sa.Connection, name: str, new_name: str) -> ResourceClass:
    """Rename a custom class (1.2-1.6 PUT); ``ResourceClassExists`` when the name is taken.

    A name taken meanwhile by a concurrent writer is a duplicate key: a lost
    race, whose next attempt finds the other class.
    """
    old = require(conn, name)
    if old.is_standard:
        raise StandardResourceClass(old.name, "update")
    if new_name != old.name and get(conn, new_name) is not None:
        raise ResourceClassExists(new_name)
    conn.execute(_rc.update().where(_rc.c.id == old.id)
                 .values(name=new_name, updated_at=utcnow()))
    return require(conn, new_name)


def delete(conn: sa.Connection, name: str) -> None:
    """Delete a custom class that no inventory uses."""
    rc = require(conn, name)
    if rc.is_standard:
        raise StandardResourceClass(rc.name, "delete")
    in_use = conn.execute(sa.select(t.inventories.c.id)
                          .where(t.inventories.c.resource_class_id == rc.id).limit(1)).first()
    if in_use:
        raise ResourceClassInUse(rc.name)
    result = conn.execute(_rc.delete().where(_rc.c.id == rc.id))
    if result.rowcount != 1:
        raise ResourceClassNotFound(rc.name)
