"""The dashboard's read-only views of the whole cloud, as plain data.

Provider trees a page at a time (with each provider's inventories, usage,
traits and aggregates), cloud-wide totals per resource class, the fullest and
emptiest providers, usage per project and per consumer type, one
consumer's allocations with the providers' names, and the names of any
providers by uuid (for the history and audit views, whose entries carry uuids).

Every amount follows the one capacity rule in ``capacity``: what an inventory
can hold is ``capacity.capacity()`` and what it holds is ``capacity.usage()``
(``capacity.inventory_report`` reads it for every record at once), so the
dashboard shows the numbers the API and the claim check use.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import allocations, capacity
from allotment.ledger.common import class_names
from allotment.ledger.consumers import UNKNOWN_TYPE
from allotment.ledger.errors import ProviderNotFound


@dataclass(frozen=True)
class Page:
    """One page of a longer list: how many there are in all, and this page's items."""

    total: int
    items: list[dict[str, Any]]


def _like_pattern(text: str) -> str:
    """``%text%`` for a case-insensitive LIKE, the wildcards in ``text`` escaped."""
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


# --- provider trees ----------------------------------------------------------

# Children drawn per provider, and providers per answer at most: a tree as
# wide as a cloud is shown a part at a time (``children`` pages on), never
# sent whole.
CHILDREN_SHOWN = 50
MOST_NODES = 2000


def provider_trees(conn: sa.Connection, limit: int, offset: int,
                   search: str | None = None, roots: Sequence[str] | None = None) -> Page:
    """Trees ordered by their root's name, ``limit`` of them from ``offset``.

    ``search`` keeps the trees with a provider whose name contains it (any
    case) or whose uuid it is; ``roots`` keeps the trees of those root uuids.
    Each item is the root provider (see ``_subtrees``) with its descendants.
    """
    rp = t.resource_providers
    chosen = sa.select(rp.c.id, rp.c.name).where(rp.c.id == rp.c.root_provider_id)
    if search:
        member = t.resource_providers.alias("member")
        chosen = chosen.where(rp.c.id.in_(
            sa.select(member.c.root_provider_id).where(sa.or_(
                sa.func.lower(member.c.name).like(_like_pattern(search), escape="\\"),
                member.c.uuid == search.strip().lower()))))
    if roots is not None:
        chosen = chosen.where(rp.c.uuid.in_(list(roots)))
    return _page_of_subtrees(conn, chosen, limit, offset)


def children(conn: sa.Connection, parent_uuid: str, limit: int, offset: int) -> Page:
    """A provider's children ordered by name, ``limit`` from ``offset``, each with
    its descendants; ``ProviderNotFound`` when there is no such provider."""
    rp = t.resource_providers
    parent_id = conn.execute(sa.select(rp.c.id).where(rp.c.uuid == parent_uuid)).scalar()
    if parent_id is None:
        raise ProviderNotFound(parent_uuid)
    chosen = sa.select(rp.c.id, rp.c.name).where(rp.c.parent_provider_id == parent_id)
    return _page_of_subtrees(conn, chosen, limit, offset)


def _page_of_subtrees(conn: sa.Connection, chosen: sa.Select, limit: int,
                      offset: int) -> Page:
    rp = t.resource_providers
    total = conn.execute(sa.select(sa.func.count()).select_from(chosen.subquery())).scalar_one()
    page_ids = [row.id for row in conn.execute(
        chosen.order_by(rp.c.name, rp.c.id).limit(limit).offset(offset))]
    return Page(total=total, items=_subtrees(conn, page_ids))


def _subtrees(conn: sa.Connection, top_ids: list[int]) -> list[dict[str, Any]]:
    """The providers ``top_ids`` with their descendants, nested, a level at a time.

    Each provider: ``uuid, name, generation, parent_provider_uuid,
    root_provider_uuid, inventories`` (per class: the record, its
    ``capacity`` and ``used``), ``traits``, ``aggregates``, ``child_count`` and
    ``children``: its first ``CHILDREN_SHOWN`` children by name, fewer once
    the answer holds ``MOST_NODES`` providers (``child_count`` says how many
    there are).
    """
    rp = t.resource_providers
    nodes = _providers(conn, top_ids)
    parents: dict[int, int] = {}
    level = top_ids
    while level and len(nodes) < MOST_NODES:
        numbered = (sa.select(rp.c.id, rp.c.parent_provider_id, sa.func.row_number().over(
            partition_by=rp.c.parent_provider_id, order_by=(rp.c.name, rp.c.id)).label("n"))
            .where(rp.c.parent_provider_id.in_(level)).subquery())
        shown = conn.execute(
            sa.select(numbered.c.id, numbered.c.parent_provider_id)
            .where(numbered.c.n <= CHILDREN_SHOWN)
            .order_by(numbered.c.parent_provider_id, numbered.c.n)
            .limit(MOST_NODES - len(nodes))).all()
        parents.update({row.id: row.parent_provider_id for row in shown})
        level = [row.id for row in shown]
        nodes.update(_providers(conn, level))
    _add_holdings(conn, nodes)
    for provider_id, parent_id in parents.items():
        nodes[parent_id]["children"].append(nodes[provider_id])
    for node in nodes.values():
        node["children"].sort(key=lambda child: (child["name"], child["uuid"]))
    return [nodes[provider_id] for provider_id in top_ids]


def _providers(conn: sa.Connection, ids: list[int]) -> dict[int, dict[str, Any]]:
    """The providers ``ids`` by id, with their child counts; nothing they hold yet."""
    if not ids:
        return {}
    rp, root, parent = (t.resource_providers, t.resource_providers.alias("root"),
                        t.resource_providers.alias("parent"))
    child = t.resource_providers.alias("child")
    child_count = (sa.select(sa.func.count()).where(child.c.parent_provider_id == rp.c.id)
                   .scalar_subquery())
    return {row.id: {"uuid": row.uuid, "name": row.name, "generation": row.generation,
                     "parent_provider_uuid": row.parent_uuid,
                     "root_provider_uuid": row.root_uuid, "inventories": {}, "traits": [],
                     "aggregates": [], "child_count": int(row.child_count), "children": []}
            for row in conn.execute(
                sa.select(rp.c.id, rp.c.uuid, rp.c.name, rp.c.generation,
                          parent.c.uuid.label("parent_uuid"), root.c.uuid.label("root_uuid"),
                          child_count.label("child_count"))
                .select_from(rp.join(root, root.c.id == rp.c.root_provider_id)
                             .outerjoin(parent, parent.c.id == rp.c.parent_provider_id))
                .where(rp.c.id.in_(ids)))}


def _add_holdings(conn: sa.Connection, nodes: dict[int, dict[str, Any]]) -> None:
    """Each node's inventories (with capacity and usage), traits and aggregates."""
    ids = list(nodes)
    if not ids:
        return
    inventory, rc = t.inventories.alias("inventory"), t.resource_classes
    for record in conn.execute(
            sa.select(inventory.c.resource_provider_id, rc.c.name, inventory.c.total,
                      inventory.c.reserved, inventory.c.allocation_ratio,
                      inventory.c.min_unit, inventory.c.max_unit, inventory.c.step_size,
                      capacity.usage(inventory).label("used"))
            .select_from(inventory.join(rc, rc.c.id == inventory.c.resource_class_id))
            .where(inventory.c.resource_provider_id.in_(ids))
            .order_by(inventory.c.resource_provider_id, rc.c.name)):
        nodes[record.resource_provider_id]["inventories"][record.name] = _inventory(record)

    _add_linked(conn, nodes, "traits", t.resource_provider_traits.c.trait_id, t.traits.c.name)
    _add_linked(conn, nodes, "aggregates", t.resource_provider_aggregates.c.aggregate_id,
                t.placement_aggregates.c.uuid)


def _add_linked(conn: sa.Connection, nodes: dict[int, dict[str, Any]], key: str,
                link: sa.Column[Any], shown: sa.Column[Any]) -> None:
    """Append to each node's ``key`` list, in order, the ``shown`` column of the
    rows its link table (``link``'s, with ``resource_provider_id``) names."""
    links, named = link.table, shown.table
    for row in conn.execute(
            sa.select(links.c.resource_provider_id, shown)
            .select_from(links.join(named, named.c.id == link))
            .where(links.c.resource_provider_id.in_(list(nodes))).order_by(shown)):
        nodes[row.resource_provider_id][key].append(row[1])


def _inventory(row: Any) -> dict[str, Any]:
    return {"total": row.total, "reserved": row.reserved,
            "allocation_ratio": capacity.shown_ratio(row.allocation_ratio),
            "min_unit": row.min_unit, "max_unit": row.max_unit, "step_size": row.step_size,
            "capacity": capacity.capacity(row.total, row.reserved, row.allocation_ratio),
            "used": int(row.used)}


# --- cloud-wide totals and rankings -------------------------------------------

def summary(conn: sa.Connection, rank_limit: int,
            resource_class: str | None = None) -> dict[str, Any]:
    """Counts, totals per class and the ``rank_limit`` fullest and emptiest providers.

    A provider's fullness is ``used / capacity`` of its fullest inventory
    record (of ``resource_class`` only, when given); records that can hold
    nothing are left out. Ties go to the older provider.
    """
    records = capacity.inventory_report(conn)
    totals: dict[str, dict[str, Any]] = {}
    fullness: dict[int, tuple[float, str, int, int]] = {}
    for row in records:
        held = capacity.capacity(row.total, row.reserved, row.allocation_ratio)
        used = int(row.used)
        entry = totals.setdefault(row.resource_class, {
            "total": 0, "reserved": 0, "capacity": 0, "used": 0, "providers": 0})
        entry["total"] += row.total
        entry["reserved"] += row.reserved
        entry["capacity"] = min(entry["capacity"] + held, capacity.MAX_TOTAL)
        entry["used"] = min(entry["used"] + used, capacity.MAX_TOTAL)
        entry["providers"] += 1
        if held <= 0 or (resource_class is not None and row.resource_class != resource_class):
            continue
        ratio = used / held
        best = fullness.get(row.provider_id)
        if best is None or ratio > best[0]:
            fullness[row.provider_id] = (ratio, row.resource_class, used, held)
    ranked = list(fullness.items())
    fullest = heapq.nsmallest(rank_limit, ranked, key=lambda item: (-item[1][0], item[0]))
    emptiest = heapq.nsmallest(rank_limit, ranked, key=lambda item: (item[1][0], item[0]))
    names = _provider_names(conn, {pid for pid, _ in fullest + emptiest})

    def ranking(items: list[tuple[int, tuple[float, str, int, int]]]) -> list[dict[str, Any]]:
        return [{**names[pid], "fullness": ratio, "resource_class": rc_name, "used": used,
                 "capacity": held} for pid, (ratio, rc_name, used, held) in items]

    rp = t.resource_providers
    counts = conn.execute(sa.select(
        sa.func.count(),
        sa.func.coalesce(sa.func.sum(sa.case((rp.c.id == rp.c.root_provider_id, 1),
                                             else_=0)), 0))).one()
    consumers = conn.execute(sa.select(sa.func.count(sa.distinct(t.allocations.c.consumer_id)))
                             ).scalar_one()
    return {"providers": int(counts[0]), "trees": int(counts[1]),
            "consumers": int(consumers), "totals": dict(sorted(totals.items())),
            "fullest": ranking(fullest), "emptiest": ranking(emptiest)}


def _provider_names(conn: sa.Connection, ids: set[int]) -> dict[int, dict[str, Any]]:
    if not ids:
        return {}
    rp, root = t.resource_providers, t.resource_providers.alias("root")
    rows = conn.execute(
        sa.select(rp.c.id, rp.c.uuid, rp.c.name, root.c.uuid.label("root_uuid"),
                  root.c.name.label("root_name"))
        .select_from(rp.join(root, root.c.id == rp.c.root_provider_id))
        .where(rp.c.id.in_(ids)))
    return {row.id: {"uuid": row.uuid, "name": row.name, "root_provider_uuid": row.root_uuid,
                     "root_provider_name": row.root_name} for row in rows}


def provider_names(conn: sa.Connection, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each provider of ``uuids`` that exists: its name and its tree's root, by uuid."""
    if not uuids:
        return {}
    rp = t.resource_providers
    ids = set(conn.execute(sa.select(rp.c.id).where(rp.c.uuid.in_(set(uuids)))).scalars())
    return {entry.pop("uuid"): entry for entry in _provider_names(conn, ids).values()}


# --- usage per project and per consumer type ----------------------------------

def usage_by_project(conn: sa.Connection, limit: int, offset: int,
                     projects: Sequence[str] | None = None) -> Page:
    """Projects holding allocations, by project id: per class amounts and consumer counts
    (of those whose external ids are ``projects`` only, when given)."""
    a, c, p = t.allocations, t.consumers, t.projects
    holding = (sa.select(p.c.id, p.c.external_id)
               .where(p.c.id.in_(sa.select(c.c.project_id)
                                 .select_from(c.join(a, a.c.consumer_id == c.c.uuid)))))
    if projects is not None:
        holding = holding.where(p.c.external_id.in_(list(projects)))
    total = conn.execute(sa.select(sa.func.count()).select_from(holding.subquery())).scalar_one()
    page = {row.id: row.external_id for row in conn.execute(
        holding.order_by(p.c.external_id).limit(limit).offset(offset))}
    if not page:
        return Page(total=total, items=[])
    joined = a.join(c, a.c.consumer_id == c.c.uuid)
    items = {project_id: {"project_id": external_id, "consumer_count": 0, "usages": {}}
             for project_id, external_id in page.items()}
    for row in conn.execute(
            sa.select(c.c.project_id, sa.func.count(sa.distinct(a.c.consumer_id)))
            .select_from(joined).where(c.c.project_id.in_(list(page)))
            .group_by(c.c.project_id)):
        items[row[0]]["consumer_count"] = int(row[1])
    sums = conn.execute(
        sa.select(c.c.project_id, a.c.resource_class_id, sa.func.sum(a.c.used))
        .select_from(joined).where(c.c.project_id.in_(list(page)))
        .group_by(c.c.project_id, a.c.resource_class_id)).all()
    names = class_names(conn, {row[1] for row in sums})
    for project_id, class_id, used in sums:
        items[project_id]["usages"][names[class_id]] = int(used)
    return Page(total=total, items=[items[project_id] for project_id in page])


def usage_by_consumer_type(conn: sa.Connection) -> dict[str, dict[str, int]]:
    """Per consumer type (``unknown`` for none), the whole cloud's amounts per class
    plus ``consumer_count``: ``GET /usages``'s 1.38 shape without a project."""
    a, c, ct = t.allocations, t.consumers, t.consumer_types
    type_name = sa.func.coalesce(ct.c.name, UNKNOWN_TYPE)
    joined = (a.join(c, a.c.consumer_id == c.c.uuid)
              .outerjoin(ct, c.c.consumer_type_id == ct.c.id))
    result: dict[str, dict[str, int]] = defaultdict(dict)
    for name, count in conn.execute(
            sa.select(type_name, sa.func.count(sa.distinct(a.c.consumer_id)))
            .select_from(joined).group_by(type_name)):
        result[name]["consumer_count"] = int(count)
    sums = conn.execute(
        sa.select(type_name, a.c.resource_class_id, sa.func.sum(a.c.used))
        .select_from(joined).group_by(type_name, a.c.resource_class_id)).all()
    names = class_names(conn, {row[1] for row in sums})
    for name, class_id, used in sums:
        result[name][names[class_id]] = int(used)
    return dict(sorted(result.items()))


# --- one consumer -------------------------------------------------------------

def consumer(conn: sa.Connection, consumer_uuid: str) -> dict[str, Any] | None:
    """What a consumer holds, per provider with its name and tree; None when nothing."""
    found = allocations.for_consumer(conn, consumer_uuid)
    if found is None:
        return None
    rp = t.resource_providers
    ids = {row.id: row.uuid for row in conn.execute(
        sa.select(rp.c.id, rp.c.uuid)
        .where(rp.c.uuid.in_({held.provider_uuid for held in found.held})))}
    names = {entry["uuid"]: entry for entry in _provider_names(conn, set(ids)).values()}
    by_provider: dict[str, dict[str, Any]] = {}
    for held in found.held:
        entry = by_provider.setdefault(held.provider_uuid, {
            **{key: value for key, value in names[held.provider_uuid].items()
               if key != "uuid"},
            "generation": held.provider_generation, "resources": {}})
        entry["resources"][held.resource_class] = held.used
    info = found.consumer
    return {"consumer_uuid": info.uuid, "consumer_generation": info.generation,
            "project_id": info.project, "user_id": info.user,
            "consumer_type": info.consumer_type or UNKNOWN_TYPE,
            "allocations": by_provider}
