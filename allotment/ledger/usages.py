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


# A project's (and user's) usage is work in proportion to what its consumers
# hold: its consumers by their project index, each one's allocation rows by
# their consumer index. Joined plainly, a planner that knows nothing of the
# tables' sizes (a freshly loaded database) reads the join the other way
# round -- every allocation of the cloud hashed or scanned to find the
# project's -- so the order is fixed per database: PostgreSQL reads each
# consumer's rows in a LATERAL subquery (its OFFSET keeps the planner from
# flattening it back into a join it may hash), MySQL/MariaDB joins in the
# order written (STRAIGHT_JOIN) over the indexes named, SQLite's planner
# already probes the index. tests/test_plans_without_statistics.py.
_BY_PROJECT = "FORCE INDEX (consumers_project_id_uuid_idx)"
_BY_PROJECT_AND_USER = "FORCE INDEX (consumers_project_id_user_id_uuid_idx)"
_BY_CONSUMER = "FORCE INDEX (allocations_consumer_id_idx)"


def _owner(table: sa.Table, external_id: str) -> sa.ScalarSelect[Any]:
    """The id of the project or user with ``external_id`` (NULL: none, nothing matches)."""
    return sa.select(table.c.id).where(table.c.external_id == external_id).scalar_subquery()


# The allocation rows of each consumer, as PostgreSQL reads them (above).
_HELD_LATERAL = (sa.select(t.allocations.c.resource_class_id, t.allocations.c.used)
                 .where(t.allocations.c.consumer_id == t.consumers.c.uuid)
                 .offset(0).lateral("held"))


def _held(dialect: str) -> Any:
    """The allocation rows joined to each consumer: their ``resource_class_id`` and ``used``."""
    return _HELD_LATERAL if dialect == "postgresql" else t.allocations


def _project_select(dialect: str, columns: list[Any], project_id: str,
                    user_id: str | None) -> sa.Select:
    """``columns`` of the project's (and user's) consumers joined to their
    allocation rows (``_held``), driven by the consumers."""
    c, a = t.consumers, t.allocations
    where = [c.c.project_id == _owner(t.projects, project_id)]
    if user_id:
        where.append(c.c.user_id == _owner(t.users, user_id))
    joined = (c.join(_HELD_LATERAL, sa.true()) if dialect == "postgresql"
              else c.join(a, a.c.consumer_id == c.c.uuid))
    return (sa.select(*columns).select_from(joined).where(*where)
            .prefix_with("STRAIGHT_JOIN", dialect="mysql")
            .with_hint(c, _BY_PROJECT_AND_USER if user_id else _BY_PROJECT, "mysql")
            .with_hint(a, _BY_CONSUMER, "mysql"))


def for_project(conn: sa.Connection, project_id: str, user_id: str | None) -> dict[str, int]:
    """Per class: the amount held by the project's (and user's) consumers."""
    held = _held(conn.dialect.name)
    rows = conn.execute(
        _project_select(conn.dialect.name, [held.c.resource_class_id, sa.func.sum(held.c.used)],
                        project_id, user_id)
        .group_by(held.c.resource_class_id)).all()
    names = class_names(conn, {row[0] for row in rows})
    # In class id order, whatever order the database grouped in.
    return {names[row[0]]: int(row[1]) for row in sorted(rows)}


def for_project_by_type(conn: sa.Connection, project_id: str, user_id: str | None,
                        consumer_type: str | None) -> dict[str, dict[str, int]]:
    """Per consumer type: per class amounts plus ``consumer_count`` (1.38).

    ``consumer_type`` "all" lumps every consumer under "all"; "unknown"
    keeps only consumers without a type; any other name keeps that type.
    """
    c, ct = t.consumers, t.consumer_types
    held = _held(conn.dialect.name)
    # "all" is one group; otherwise one group per type name, a lookup of the
    # consumer's type id (a join to the types is a hash join on a database
    # without statistics). An id without a type row is "unknown", as a NULL
    # id is. Grouped by the name, not the id: grouped by the id, PostgreSQL
    # without statistics read every consumer of the cloud in the order of
    # the type index (sorted groups for free) to keep the project's.
    lump = consumer_type == ALL_TYPES
    type_name = sa.func.coalesce(
        sa.select(ct.c.name).where(ct.c.id == c.c.consumer_type_id).scalar_subquery(),
        UNKNOWN_TYPE).label("type_name")
    by_type: sa.ColumnClause[Any] = sa.literal_column("type_name")

    def select(columns: list[Any], by: list[Any]) -> sa.Select:
        sel = _project_select(conn.dialect.name, ([] if lump else [type_name]) + columns,
                              project_id, user_id)
        if consumer_type == UNKNOWN_TYPE:
            sel = sel.where(c.c.consumer_type_id.is_(None))
        elif consumer_type and not lump:
            # "+ 0": a test of each of the project's consumers, not an index
            # to drive by -- SQLite's planner would otherwise read every
            # consumer of the type in the cloud by the type index.
            sel = sel.where(c.c.consumer_type_id + 0 == sa.select(ct.c.id).where(
                ct.c.name == consumer_type).scalar_subquery())
        by = by if lump else [by_type, *by]
        return sel.group_by(*by) if by else sel

    def key(row: sa.Row[Any]) -> tuple[str, tuple[Any, ...]]:
        return (ALL_TYPES, tuple(row)) if lump else (row[0], tuple(row[1:]))

    counts: dict[str, int] = defaultdict(int)
    for row in conn.execute(select([sa.func.count(sa.distinct(c.c.id))], [])):
        grp, (count,) = key(row)
        counts[grp] += int(count)
    used: dict[tuple[str, int], int] = defaultdict(int)
    for row in conn.execute(select([held.c.resource_class_id, sa.func.sum(held.c.used)],
                                   [held.c.resource_class_id])):
        grp, (class_id, amount) = key(row)
        used[(grp, class_id)] += int(amount)
    names = class_names(conn, {class_id for _, class_id in used})
    # In group name and class id order, whatever order the database grouped in.
    result: dict[str, dict[str, int]] = defaultdict(dict)
    for (grp, class_id), amount in sorted(used.items()):
        result[grp][names[class_id]] = amount
        result[grp]["consumer_count"] = counts[grp]
    return dict(result)
