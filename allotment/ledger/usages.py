"""Usage reports: sums of allocated amounts per provider, or per project/user."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import capacity
from allotment.ledger.common import class_names
from allotment.ledger.consumers import UNKNOWN_TYPE

# The consumer_type query values that group instead of filtering by name.
ALL_TYPES = "all"


def for_provider(conn: sa.Connection, provider_id: int) -> dict[str, int]:
    """Per class the provider has inventory of: the amount in use (0 when none).

    The provider's inventory rows, each with its usage as ``capacity.usage``
    defines it (a correlated sum over the allocations index on provider and
    class): index probes whatever the planner knows, where a join to the
    allocations was planned as a hash join without statistics.
    """
    inv = t.inventories
    rows = conn.execute(
        sa.select(inv.c.resource_class_id, capacity.usage(inv))
        .where(inv.c.resource_provider_id == provider_id)
        .order_by(inv.c.resource_class_id)).all()
    names = class_names(conn, {row[0] for row in rows})
    return {names[row[0]]: int(row[1]) for row in rows}


def _project_select(columns: list, project_id: str, user_id: str | None) -> sa.Select:
    a, c, p, u = t.allocations, t.consumers, t.projects, t.users
    joined = a.join(c, a.c.consumer_id == c.c.uuid).join(p, c.c.project_id == p.c.id)
    sel = sa.select(*columns).where(p.c.external_id == project_id)
    if user_id:
        joined = joined.join(u, c.c.user_id == u.c.id)
        sel = sel.where(u.c.external_id == user_id)
    return sel.select_from(joined)


def for_project(conn: sa.Connection, project_id: str, user_id: str | None) -> dict[str, int]:
    """Per class: the amount held by the project's (and user's) consumers."""
    a = t.allocations
    rows = conn.execute(
        _project_select([a.c.resource_class_id, sa.func.sum(a.c.used)], project_id, user_id)
        .group_by(a.c.resource_class_id)).all()
    names = class_names(conn, {row[0] for row in rows})
    return {names[row[0]]: int(row[1]) for row in rows}


def for_project_by_type(conn: sa.Connection, project_id: str, user_id: str | None,
                        consumer_type: str | None) -> dict[str, dict[str, int]]:
    """Per consumer type: per class amounts plus ``consumer_count`` (1.38).

    ``consumer_type`` "all" lumps every consumer under "all"; "unknown"
    keeps only consumers without a type; any other name keeps that type.
    """
    a, c, ct = t.allocations, t.consumers, t.consumer_types
    # "all" is one group; otherwise one group per type name (NULL: "unknown").
    lump = consumer_type == ALL_TYPES
    type_name = sa.func.coalesce(ct.c.name, UNKNOWN_TYPE)

    def select(columns: list) -> sa.Select:
        sel = _project_select(([] if lump else [type_name]) + columns, project_id, user_id)
        # The type is joined on top of the consumer join built above.
        sel = sel.outerjoin(ct, c.c.consumer_type_id == ct.c.id)
        if consumer_type == UNKNOWN_TYPE:
            sel = sel.where(c.c.consumer_type_id.is_(None))
        elif consumer_type and not lump:
            sel = sel.where(ct.c.name == consumer_type)
        return sel if lump else sel.group_by(type_name)

    def key(row: sa.Row[Any]) -> tuple[str, tuple[Any, ...]]:
        return (ALL_TYPES, tuple(row)) if lump else (row[0], tuple(row[1:]))

    counts = dict(key(row) for row in conn.execute(
        select([sa.func.count(sa.distinct(a.c.consumer_id))])))
    rows = [key(row) for row in conn.execute(
        select([a.c.resource_class_id, sa.func.sum(a.c.used)])
        .group_by(a.c.resource_class_id))]
    names = class_names(conn, {class_id for _, (class_id, _) in rows})
    result: dict[str, dict[str, int]] = defaultdict(dict)
    for grp, (class_id, used) in rows:
        result[grp][names[class_id]] = int(used)
        result[grp]["consumer_count"] = int(counts[grp][0])
    return dict(result)
