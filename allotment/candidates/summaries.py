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
from allotment.candidates.sql import CACHE, RP, chunks, ids, used
from allotment.db import tables as t


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


def _text(column):
    return sa.cast(column, sa.String)


def _summary_rows(selector):
    """One row per selected provider: its inventories and traits as text.

    Folding a provider's inventories (with usage) and traits into two
    string aggregates gives one row per provider and one statement for the
    whole summary, instead of a row per inventory plus a second query for
    traits. Class and trait names are ``[A-Z0-9_]`` only, so the separators
    are safe; numbers travel as text and are converted (and the capacity
    computed) in Python, the same on every backend.
    """
    inv = t.inventories.alias("sum_inv")
    rc = t.resource_classes.alias("sum_rc")
    rpt = t.resource_provider_traits.alias("sum_rpt")
    tr = t.traits.alias("sum_tr")
    inventories = (
        sa.select(sa.func.aggregate_strings(
            rc.c.name + " " + _text(inv.c.total) + " " + _text(inv.c.reserved) + " "
            + _text(inv.c.allocation_ratio) + " " + _text(used(inv)), ","))
        .select_from(inv.join(rc, rc.c.id == inv.c.resource_class_id))
        .where(inv.c.resource_provider_id == RP.c.id)
        .scalar_subquery())
    traits = (
        sa.select(sa.func.aggregate_strings(_text(rpt.c.trait_id) + " " + tr.c.name, ","))
        .select_from(rpt.join(tr, tr.c.id == rpt.c.trait_id))
        .where(rpt.c.resource_provider_id == RP.c.id)
        .scalar_subquery())
    return sa.select(RP.c.id, RP.c.uuid, RP.c.parent_provider_id, RP.c.root_provider_id,
                     inventories, traits).where(selector)


@functools.lru_cache(maxsize=2)
def _summary_statement(by_root: bool):
    column = RP.c.root_provider_id if by_root else RP.c.id
    return _summary_rows(column.in_(ids("ids")))


def _collect(rows, found: dict[int, ProviderSummary]) -> None:
    # Providers of one kind (same inventory, same traits) give the same text:
    # parse each distinct text once and share the result (never mutated).
    resources_of: dict[str | None, dict[str, dict[str, int]]] = {None: {}}
    traits_of: dict[str | None, list[str]] = {None: []}
    for provider, uuid, parent, root, inventories, traits in rows:
        resources = resources_of.get(inventories)
        if resources is None:
            resources = resources_of[inventories] = _parse_inventories(inventories)
        names = traits_of.get(traits)
        if names is None:
            names = traits_of[traits] = _parse_traits(traits)
        found[provider] = ProviderSummary(provider, uuid, parent, root, resources, names)


def _parse_inventories(text: str) -> dict[str, dict[str, int]]:
    resources = {}
    for item in text.split(","):
        name, total, reserved, ratio, in_use = item.split(" ")
        resources[name] = {"capacity": int((int(total) - int(reserved)) * float(ratio)),
                           "used": int(in_use)}
    return resources


def _parse_traits(text: str) -> list[str]:
    # Trait id order, as upstream's (unordered) query returns them.
    pairs = sorted((int(ident), name) for ident, name in
                   (item.split(" ") for item in text.split(",")))
    return [name for _, name in pairs]


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
        statement = _summary_statement(by_root)
        for chunk in chunks(sorted(set(wanted))):
            _collect(conn.execute(statement, {"ids": chunk}), found)
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
    params = {**group_params(group, "g_"), **roots.params(), "limit": limit}
    found: dict[int, ProviderSummary] = {}
    _collect(conn.execute(statement, params), found)
    _link(found)
    return found


_UUIDS = sa.select(RP.c.id, RP.c.uuid).where(RP.c.id.in_(ids("ids")))


def provider_uuids(conn: sa.Connection, ids: Iterable[int]) -> dict[int, str]:
    found: dict[int, str] = {}
    for chunk in chunks(sorted(set(ids))):
        found.update({row[0]: row[1] for row in conn.execute(_UUIDS, {"ids": chunk})})
    return found


