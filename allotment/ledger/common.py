"""Small helpers shared by the ledger modules (plain values in, rows out)."""

from __future__ import annotations

import datetime

import os_resource_classes as orc
import sqlalchemy as sa

from allotment import errors
from allotment.db import tables as t


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def is_duplicate(exc: sa.exc.IntegrityError) -> bool:
    """True when an IntegrityError is a unique-key violation."""
    text = str(exc.orig).lower()
    return "unique" in text or "duplicate" in text


# Standard resource classes never change: their ids are their index.
STANDARD_CLASS_IDS = {name: index for index, name in enumerate(orc.STANDARDS)}
STANDARD_CLASS_NAMES = dict(enumerate(orc.STANDARDS))


def class_ids(conn: sa.Connection, names: set[str] | list[str]) -> dict[str, int]:
    """Map resource class names to ids; unknown names are left out."""
    found = {n: STANDARD_CLASS_IDS[n] for n in names if n in STANDARD_CLASS_IDS}
    custom = [n for n in names if n not in found]
    if custom:
        rows = conn.execute(sa.select(t.resource_classes.c.id, t.resource_classes.c.name)
                            .where(t.resource_classes.c.name.in_(custom)))
        found.update({row.name: row.id for row in rows})
    return found


def class_id(conn: sa.Connection, name: str) -> int:
    """The id of one resource class; 400 when it does not exist."""
    ids = class_ids(conn, [name])
    if name not in ids:
        raise errors.BadRequest(f"Unknown resource class in inventory: {name}")
    return ids[name]


def class_names(conn: sa.Connection, ids: set[int] | list[int]) -> dict[int, str]:
    found = {i: STANDARD_CLASS_NAMES[i] for i in ids if i in STANDARD_CLASS_NAMES}
    custom = [i for i in ids if i not in found]
    if custom:
        rows = conn.execute(sa.select(t.resource_classes.c.id, t.resource_classes.c.name)
                            .where(t.resource_classes.c.id.in_(custom)))
        found.update({row.id: row.name for row in rows})
    return found


def trait_ids(conn: sa.Connection, names: set[str] | list[str]) -> dict[str, int]:
    """Map trait names to ids; unknown names are left out."""
    names = list(names)
    if not names:
        return {}
    rows = conn.execute(sa.select(t.traits.c.id, t.traits.c.name)
                        .where(t.traits.c.name.in_(names)))
    return {row.name: row.id for row in rows}


def trait_names(conn: sa.Connection, ids: set[int] | list[int]) -> dict[int, str]:
    """Map trait ids to names; unknown ids are left out."""
    ids = list(ids)
    if not ids:
        return {}
    rows = conn.execute(sa.select(t.traits.c.id, t.traits.c.name)
                        .where(t.traits.c.id.in_(ids)))
    return {row.id: row.name for row in rows}


def aggregate_ids(conn: sa.Connection, uuids: set[str] | list[str]) -> dict[str, int]:
    uuids = list(uuids)
    if not uuids:
        return {}
    rows = conn.execute(sa.select(t.placement_aggregates.c.id, t.placement_aggregates.c.uuid)
                        .where(t.placement_aggregates.c.uuid.in_(uuids)))
    return {row.uuid: row.id for row in rows}
