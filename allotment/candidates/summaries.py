"""Provider summaries: the trees (or providers) of the answer, read last.

Inventories with their usage and capacity, and traits, in two statements
per chunk of ids; ``single_trees`` also picks the candidates of the
single-provider path in the same statement as their inventories.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import sqlalchemy as sa

from allotment.candidates.query import (
    GroupIds,
    GroupShape,
    Roots,
    group_params,
    group_shape,
    single_statement,
)
from allotment.candidates.sql import CACHE, INV, RP, chunks, ids, used
from allotment.db import tables as t


@dataclass
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


def _inventory_rows(selector):
    """Every selected provider with each of its inventories and their usage.

    ``selector`` is a condition on RP; a provider without inventory gives
    one row with NULL class.
    """
    rc = t.resource_classes.alias("rc")
    return (
        sa.select(RP.c.id, RP.c.uuid, RP.c.parent_provider_id, RP.c.root_provider_id,
                  rc.c.name, INV.c.total, INV.c.reserved, INV.c.allocation_ratio, used(INV))
        .select_from(RP.outerjoin(INV, INV.c.resource_provider_id == RP.c.id)
                     .outerjoin(rc, rc.c.id == INV.c.resource_class_id))
        .where(selector))


def _trait_rows(selector):
    rpt = t.resource_provider_traits.alias("rpt")
    tr = t.traits.alias("tr")
    return (sa.select(rpt.c.resource_provider_id, rpt.c.trait_id, tr.c.name)
            .select_from(rpt.join(RP, RP.c.id == rpt.c.resource_provider_id)
                         .join(tr, tr.c.id == rpt.c.trait_id))
            .where(selector))


@functools.lru_cache(maxsize=2)
def _summary_statements(by_root: bool):
    column = RP.c.root_provider_id if by_root else RP.c.id
    selector = column.in_(ids("ids"))
    return _inventory_rows(selector), _trait_rows(selector)


def _collect(inventory_rows, trait_rows, found: dict[int, ProviderSummary]) -> None:
    for provider, uuid, parent, root, name, total, reserved, ratio, in_use in inventory_rows:
        summary = found.get(provider)
        if summary is None:
            summary = found[provider] = ProviderSummary(provider, uuid, parent, root)
        if name is not None:
            summary.resources[name] = {"capacity": int((total - reserved) * ratio),
                                       "used": int(in_use)}
    # Trait id order, as upstream's (unordered) query returns them.
    for provider, _trait, name in sorted(tuple(row) for row in trait_rows):
        found[provider].traits.append(name)


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
    found: dict[int, ProviderSummary] = {}
    for by_root, wanted in ((True, roots), (False, providers)):
        inventory_rows, trait_rows = _summary_statements(by_root)
        for chunk in chunks(sorted(set(wanted))):
            _collect(conn.execute(inventory_rows, {"ids": chunk}).fetchall(),
                     conn.execute(trait_rows, {"ids": chunk}).fetchall(), found)
    _link(found)
    return found


@functools.lru_cache(maxsize=CACHE)
def _single_trees_statement(shape: GroupShape, roots: tuple[int, bool], limit: bool):
    chosen = single_statement(shape, roots, "id", limit).subquery("chosen")
    return _inventory_rows(RP.c.root_provider_id.in_(sa.select(chosen.c.id)))


def single_trees(conn: sa.Connection, group: GroupIds, roots: Roots, limit: int | None
                 ) -> dict[int, ProviderSummary]:
    """Like ``single_providers`` in id order, with the summaries of their trees.

    The matching providers (all roots here) select the trees whose inventory
    rows come back in the same statement; their traits follow in a second.
    """
    statement = _single_trees_statement(group_shape(group), roots.shape(), limit is not None)
    params = {**group_params(group, "g_"), **roots.params(), "limit": limit}
    inventory_rows = conn.execute(statement, params).fetchall()
    trees = sorted({row[3] for row in inventory_rows})
    trait_rows = []
    for chunk in chunks(trees):
        trait_rows += conn.execute(_summary_statements(True)[1], {"ids": chunk}).fetchall()
    found: dict[int, ProviderSummary] = {}
    _collect(inventory_rows, trait_rows, found)
    _link(found)
    return found


_UUIDS = sa.select(RP.c.id, RP.c.uuid).where(RP.c.id.in_(ids("ids")))


def provider_uuids(conn: sa.Connection, ids: Iterable[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for chunk in chunks(sorted(set(ids))):
        found.update({row[0]: row[1] for row in conn.execute(_UUIDS, {"ids": chunk})})
    return found


