"""Provider summaries: the trees (or providers) of the answer, read last.

Inventories with their usage and capacity, and traits, in two statements
per chunk of ids; ``single_trees`` also picks the candidates of the
single-provider path in the same statement as their inventories.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from allotment.candidates.query import (
    LIMIT,
    SINGLE,
    GroupShape,
    group_shape,
    root_params,
    single_statement,
)
from allotment.candidates.resolved import GroupIds, Roots
from allotment.candidates.sql import CACHE, RP, chunks, ids
from allotment.db import tables as t
from allotment.ledger import capacity, common


@dataclass(slots=True)
class ProviderSummary:
    id: int
    uuid: str
    parent_id: int | None
    root_id: int
    # class name -> {"capacity": ..., "used": ...}, for every inventory
    resources: dict[str, dict[str, int]] = field(default_factory=dict)
    traits: list[str] = field(default_factory=list)
    parent_uuid: str | None = None
    root_uuid: str | None = None
    # The read model's cache of this summary's JSON, by shape (None: no cache).
    rendered: dict[tuple, bytes] | None = None


def _text(column):
    return sa.cast(column, sa.String)


def _summary_rows(selector):
    """One row per selected provider: its inventories and traits as text.

    Folding a provider's inventories (with usage) and traits into two
    string aggregates gives one row per provider and one statement for the
    whole summary, instead of a row per inventory plus a second query for
    traits. The aggregates carry ids, not names: a join to the name tables
    inside a correlated subquery is what planners get wrong (PostgreSQL
    without fresh statistics scans the traits table once per provider);
    the few distinct ids are named afterwards. Numbers travel as
    text and are converted (and the capacity computed) in Python, the same
    on every backend.
    """
    inv = t.inventories.alias("sum_inv")
    rpt = t.resource_provider_traits.alias("sum_rpt")
    inventories = (
        sa.select(sa.func.aggregate_strings(
            _text(inv.c.resource_class_id) + " " + _text(inv.c.total) + " "
            + _text(inv.c.reserved) + " " + _text(inv.c.allocation_ratio) + " "
            + _text(capacity.usage(inv)), ","))
        .where(inv.c.resource_provider_id == RP.c.id)
        .scalar_subquery())
    traits = (
        sa.select(sa.func.aggregate_strings(_text(rpt.c.trait_id), ","))
        .where(rpt.c.resource_provider_id == RP.c.id)
        .scalar_subquery())
    return sa.select(RP.c.id, RP.c.uuid, RP.c.parent_provider_id, RP.c.root_provider_id,
                     inventories, traits).where(selector)


@functools.lru_cache(maxsize=2)
def _summary_statement(by_root: bool):
    column = RP.c.root_provider_id if by_root else RP.c.id
    return _summary_rows(column.in_(ids("ids")))


def _collect(conn: sa.Connection, rows) -> dict[int, ProviderSummary]:
    """Summaries from summary rows, in the order of the rows."""
    rows = list(rows)
    # Providers of one kind (same inventory, same traits) give the same text:
    # parse each distinct text once and share the result (never mutated).
    inventory_texts: dict[str | None, list[tuple[int, int, int]]] = {
        text: _parse_inventories(text) for text in {row[4] for row in rows} if text}
    trait_texts: dict[str | None, list[int]] = {
        text: sorted(int(i) for i in text.split(",")) for text in {row[5] for row in rows}
        if text}
    class_names = common.class_names(
        conn, {rc for items in inventory_texts.values() for rc, _, _ in items})
    trait_names = common.trait_names(
        conn, {trait for traits in trait_texts.values() for trait in traits})
    resources_of: dict[str | None, dict[str, dict[str, int]]] = {None: {}}
    for text, items in inventory_texts.items():
        resources_of[text] = {class_names[rc]: {"capacity": capacity, "used": in_use}
                              for rc, capacity, in_use in items}
    # Trait id order, as upstream's (unordered) query returns them.
    traits_of: dict[str | None, list[str]] = {None: []}
    for text, traits in trait_texts.items():
        traits_of[text] = [trait_names[trait] for trait in traits]
    return {provider: ProviderSummary(provider, uuid, parent, root, resources_of[inventories],
                                      traits_of[traits])
            for provider, uuid, parent, root, inventories, traits in rows}


def _parse_inventories(text: str) -> list[tuple[int, int, int]]:
    """(class id, capacity, used) from "class total reserved ratio used,..."."""
    items = []
    for item in text.split(","):
        rc, total, reserved, ratio, in_use = item.split(" ")
        items.append((int(rc), capacity.capacity(int(total), int(reserved), float(ratio)),
                      int(in_use)))
    items.sort()
    return items


def _link(found: dict[int, ProviderSummary]) -> None:
    """Fill parent and root uuids from the providers at hand."""
    for summary in found.values():
        parent = found.get(summary.parent_id) if summary.parent_id is not None else None
        root = found.get(summary.root_id)
        summary.parent_uuid = parent.uuid if parent else None
        summary.root_uuid = root.uuid if root else None


def summaries(conn: sa.Connection, roots: Iterable[int] = (),
              providers: Iterable[int] = ()) -> dict[int, ProviderSummary]:
    """Summaries of whole trees (``roots``) or of single ``providers``."""
    rows: list[sa.Row[Any]] = []
    for by_root, wanted in ((True, roots), (False, providers)):
        statement = _summary_statement(by_root)
        for chunk in chunks(sorted(set(wanted))):
            rows += conn.execute(statement, {"ids": chunk}).fetchall()
    found = _collect(conn, rows)
    _link(found)
    return found


@functools.lru_cache(maxsize=CACHE)
def _single_trees_statement(shape: GroupShape, roots: tuple[int, bool], limit: bool):
    chosen = single_statement(shape, roots, "id", limit).subquery("chosen")
    return _summary_rows(RP.c.root_provider_id.in_(sa.select(chosen.c.id)))


def single_trees(conn: sa.Connection, group: GroupIds, roots: Roots, limit: int | None
                 ) -> dict[int, ProviderSummary]:
    """Like ``single_providers`` in id order, with the summaries of their trees.

    The matching providers (all roots here) select the trees whose summary
    rows come back in the same statement.
    """
    statement = _single_trees_statement(group_shape(group), roots.shape(), limit is not None)
    params = {**SINGLE.values(group), **root_params(roots), LIMIT: limit}
    found = _collect(conn, conn.execute(statement, params))
    _link(found)
    return found


_UUIDS = sa.select(RP.c.id, RP.c.uuid).where(RP.c.id.in_(ids("ids")))


def provider_uuids(conn: sa.Connection, ids: Iterable[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for chunk in chunks(sorted(set(ids))):
        found.update({row[0]: row[1] for row in conn.execute(_UUIDS, {"ids": chunk})})
    return found


