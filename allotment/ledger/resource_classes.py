"""Resource classes: the standard ones (fixed ids) and custom ones (ids >= 10000).

A custom class takes the next id after the largest in the table (never below
10000), as upstream picks them, so both implementations can share a database.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment import errors
from allotment.db import tables as t
from allotment.ledger.common import is_duplicate, utcnow

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


def _to_class(row) -> ResourceClass:
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
        raise errors.NotFound(f"No such resource class {name}.")
    return found


class ClassExists(errors.Conflict):
    pass


class StandardClass(errors.BadRequest):
    """Standard classes can be neither renamed nor deleted."""


class ClassInUse(errors.Conflict):
    pass


def create(conn: sa.Connection, name: str) -> ResourceClass:
    """Insert a custom class; ``ClassExists`` when the name is taken."""
    for _attempt in range(_CREATE_ATTEMPTS):
        if get(conn, name) is not None:
            raise ClassExists(f"Resource class {name} already exists.")
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
    raise errors.Conflict(
        "Max retries of DB transaction exceeded attempting to create resource class: "
        f"{name}, please try again.")


def rename(conn: sa.Connection, old: ResourceClass, new_name: str) -> ResourceClass:
    """Rename a custom class (1.2-1.6 PUT); ``ClassExists`` when the name is taken."""
    if old.is_standard:
        raise StandardClass(f"Cannot update standard resource class {old.name}")
    if new_name != old.name:
        other = get(conn, new_name)
        if other is not None:
            raise ClassExists(f"Resource class {new_name} already exists.")
    try:
        with conn.begin_nested():
            conn.execute(_rc.update().where(_rc.c.id == old.id)
                         .values(name=new_name, updated_at=utcnow()))
    except IntegrityError as exc:
        if is_duplicate(exc):
            raise ClassExists(f"Resource class {new_name} already exists.") from None
        raise
    return require(conn, new_name)


def delete(conn: sa.Connection, rc: ResourceClass) -> None:
    """Delete a custom class that no inventory uses."""
    if rc.is_standard:
        raise StandardClass(f"Cannot delete standard resource class {rc.name}.")
    in_use = conn.execute(sa.select(t.inventories.c.id)
                          .where(t.inventories.c.resource_class_id == rc.id).limit(1)).first()
    if in_use:
        raise ClassInUse(
            f"Cannot delete resource class {rc.name}. Class is in use in inventory.")
    result = conn.execute(_rc.delete().where(_rc.c.id == rc.id))
    if result.rowcount != 1:
        raise errors.NotFound(f"No such resource class {rc.name}.")
