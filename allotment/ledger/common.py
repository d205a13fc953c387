"""Small helpers shared by the ledger modules (plain values in, rows out)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import os_resource_classes as orc
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.db.errors import DuplicateKey, meaning


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)


def is_duplicate(exc: sa.exc.IntegrityError) -> bool:
    """True when an IntegrityError is a unique-key violation."""
    return isinstance(meaning(exc), DuplicateKey)


# Standard resource classes never change: their ids are their index.
STANDARD_CLASS_IDS = {name: index for index, name in enumerate(orc.STANDARDS)}
STANDARD_CLASS_NAMES = dict(enumerate(orc.STANDARDS))


def _lookup(conn: sa.Connection, key: sa.Column, value: sa.Column,
            keys: Iterable) -> dict:
    """Map each of ``keys`` found in ``key``'s column to its row's ``value``."""
    keys = list(keys)
    if not keys:
        return {}
    rows = conn.execute(sa.select(key, value).where(key.in_(keys)))
    return {k: v for k, v in rows}


def class_ids(conn: sa.Connection, names: set[str] | list[str]) -> dict[str, int]:
    """Map resource class names to ids; unknown names are left out."""
    found = {n: STANDARD_CLASS_IDS[n] for n in names if n in STANDARD_CLASS_IDS}
    rc = t.resource_classes
    found.update(_lookup(conn, rc.c.name, rc.c.id, (n for n in names if n not in found)))
    return found


def class_names(conn: sa.Connection, ids: set[int] | list[int]) -> dict[int, str]:
    found = {i: STANDARD_CLASS_NAMES[i] for i in ids if i in STANDARD_CLASS_NAMES}
    rc = t.resource_classes
    found.update(_lookup(conn, rc.c.id, rc.c.name, (i for i in ids if i not in found)))
    return found


def trait_ids(conn: sa.Connection, names: set[str] | list[str]) -> dict[str, int]:
    """Map trait names to ids; unknown names are left out."""
    return _lookup(conn, t.traits.c.name, t.traits.c.id, names)


def trait_names(conn: sa.Connection, ids: set[int] | list[int]) -> dict[int, str]:
    """Map trait ids to names; unknown ids are left out."""
    return _lookup(conn, t.traits.c.id, t.traits.c.name, ids)


def aggregate_ids(conn: sa.Connection, uuids: set[str] | list[str]) -> dict[str, int]:
    """Map aggregate uuids to ids; unknown uuids are left out.

    One equality per uuid (UNION ALL): the planner then knows from the unique
    index that each finds at most one row and probes it, where for ``uuid IN
    (...)`` on a table of a few hundred aggregates it may read them all.
    """
    pa = t.placement_aggregates
    keys = sorted(uuids)
    found: dict[str, int] = {}
    # In statements of a few hundred arms (SQLite allows 500 to a compound select).
    for start in range(0, len(keys), _PROBES):
        rows = conn.execute(sa.union_all(*(
            sa.select(pa.c.uuid, pa.c.id).where(pa.c.uuid == key)
            for key in keys[start:start + _PROBES])))
        found.update((uuid, id_) for uuid, id_ in rows)
    return found


_PROBES = 200
