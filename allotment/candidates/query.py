"""The SQL of the candidate search, before the summaries: a handful of queries.

1. ``resolve``: class, trait, aggregate and provider names to ids, and in
   the same statement the layout: are there trees, and do nested or sharing
   providers hold any of the requested classes? If not, every candidate is a
   single provider: ``single_statement`` (here) selects them, filters,
   order and ``LIMIT`` included, and ``summaries.single_trees`` reads their
   trees in the same statement; with randomisation ``single_providers``
   draws in SQL and ``summaries.summaries`` follows.
2. ``match``: otherwise, for every request group and class, the providers
   with room for the amount (``ledger.capacity``: reserved, allocation
   ratio, min/max unit, step size, current usage) that also pass the group's
   trait and aggregate filters, with a few flag bits (``MatchFlag``) the
   Python side needs. All parts go out as one ``UNION ALL``.
3. ``sharing_anchors``: the trees each sharing provider serves (one query,
   only when sharing providers matched).
4. ``tree_parents``: the shape of the matched trees (only for same_subtree).

The provider summaries of the trees in the answer are read last, by
``candidates.summaries``.

Statements are built from a hashable *shape* (how many classes, trait sets,
... but no values) and cached, so a request pays for SQLAlchemy construction
and compilation once per shape; the values travel as bound parameters, lists
as expanding ``IN`` parameters. Functions take a connection and plain values
and return plain values (those of ``resolved``, shared with the read model's
path).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from allotment.candidates.request import CandidateRequest
from allotment.candidates.resolved import (
    SHARING_TRAIT,
    Anchor,
    GroupIds,
    Layout,
    MatchFlag,
    MatchRow,
    NameIds,
    Roots,
    canonical_parts,
    refuse_unknown,
)
from allotment.candidates.sql import (
    CACHE,
    INV,
    RP,
    RPT,
    bits,
    chunks,
    exists,
    has_trait,
    has_trait_id,
    ids,
    in_aggregate,
    integer,
)
from allotment.db import tables as t
from allotment.ledger import capacity
from allotment.ledger.common import STANDARD_CLASS_IDS


class LayoutFlag(enum.IntFlag):
    """Bits of the layout row of ``resolve``."""

    TREES = 1          # some provider has a parent
    NESTED_HOLDS = 2   # a nested provider has inventory of a requested class
    SHARING_HOLDS = 4  # a sharing provider has inventory of a requested class


class AnchorFlag(enum.IntFlag):
    """Bits of the ``flags`` column of sharing anchor rows (facts about the root)."""

    ROOT_OK = 1   # the anchor root passes root_required
    BAD = 2       # it is in a forbidden aggregate of the unsuffixed group


def _layout_flags():
    """Are there trees; do nested or sharing providers hold a requested class?

    Nested EXISTS, so that the few nested (or sharing) providers drive.
    """
    rp, inv, rc, tr = t.resource_providers, t.inventories, t.resource_classes, t.traits
    nested = t.resource_providers.alias("nested")
    classes = inv.c.resource_class_id.in_(
        sa.select(rc.c.id).where(rc.c.name.in_(ids("all_classes"))))
    sharing_trait = sa.select(tr.c.id).where(tr.c.name == SHARING_TRAIT).scalar_subquery()
    return bits(
        (exists(rp.c.parent_provider_id.is_not(None)), LayoutFlag.TREES),
        (exists(nested.c.parent_provider_id.is_not(None),
                exists(inv.c.resource_provider_id == nested.c.id, classes)),
         LayoutFlag.NESTED_HOLDS),
        (exists(RPT.c.trait_id == sharing_trait,
                exists(inv.c.resource_provider_id == RPT.c.resource_provider_id, classes)),
         LayoutFlag.SHARING_HOLDS),
    )


@functools.lru_cache(maxsize=8)
def _resolve_statement(custom: bool, aggregates: bool, trees: bool):
    rc, tr, agg = t.resource_classes, t.traits, t.placement_aggregates
    parts = [sa.select(sa.literal_column("'t'").label("kind"), tr.c.name.label("name"),
                       tr.c.id.label("id")).where(tr.c.name.in_(ids("traits"))),
             sa.select(sa.literal_column("'l'"), sa.literal_column("'layout'"),
                       _layout_flags())]
    if custom:
        parts.append(sa.select(sa.literal_column("'c'"), rc.c.name, rc.c.id)
                     .where(rc.c.name.in_(ids("classes"))))
    if aggregates:
        parts.append(sa.select(sa.literal_column("'a'"), agg.c.uuid, agg.c.id)
                     .where(agg.c.uuid.in_(ids("aggregates"))))
    if trees:
        parts.append(sa.select(sa.literal_column("'p'"), RP.c.uuid, RP.c.root_provider_id)
                     .where(RP.c.uuid.in_(ids("trees"))))
    return parts[0] if len(parts) == 1 else sa.union_all(*parts)


def resolve(conn: sa.Connection, request: CandidateRequest) -> NameIds:
    """Look every name up at once; 400 for unknown classes and traits."""
    custom = sorted(request.requested_classes() - set(STANDARD_CLASS_IDS))
    trait_names = set(request.root_required | request.root_forbidden) | {SHARING_TRAIT}
    agg_uuids: set[str] = set()
    trees: set[str] = set()
    for group in request.groups:
        trait_names |= group.forbidden.union(*group.required)
        agg_uuids |= group.forbidden_aggs.union(*group.member_of)
        if group.in_tree:
            trees.add(group.in_tree)
    names = NameIds(classes={n: STANDARD_CLASS_IDS[n] for n in request.requested_classes()
                           if n in STANDARD_CLASS_IDS})
    statement = _resolve_statement(bool(custom), bool(agg_uuids), bool(trees))
    params = {"traits": sorted(trait_names), "classes": custom,
              "aggregates": sorted(agg_uuids), "trees": sorted(trees),
              "all_classes": sorted(request.requested_classes())}
    targets = {"c": names.classes, "t": names.traits, "a": names.aggregates,
               "p": names.tree_roots, "l": {}}
    for kind, name, ident in conn.execute(statement, params):
        targets[kind][name] = ident
    flags = targets["l"]["layout"]
    names.layout = Layout(
        has_trees=bool(flags & LayoutFlag.TREES),
        spread_possible=bool(flags & (LayoutFlag.NESTED_HOLDS | LayoutFlag.SHARING_HOLDS)))
    names.sharing_trait = names.traits.get(SHARING_TRAIT)
    refuse_unknown(request, names)
    return names


# Request-wide bound parameters, named once for builders and values alike.
ROOT_FORBIDDEN = "root_forb"
SHARING_TRAIT_ID = "sharing"
LIMIT = "limit"


def root_required_param(i: int) -> str:
    return f"root_req{i}"


def trait_bit_param(i: int) -> str:
    """Bit ``i`` of a match row's ``traits``: has the unsuffixed group's trait ``i``."""
    return f"bit{i}"


def root_params(roots: Roots) -> dict[str, Any]:
    """The values of the root_required parameters (``_root_ok``)."""
    values: dict[str, Any] = {root_required_param(i): trait
                              for i, trait in enumerate(roots.required)}
    values[ROOT_FORBIDDEN] = list(roots.forbidden)
    return values


def _root_ok(root_col, shape: tuple[int, bool]):
    """root_required on a root provider id column (None when unused)."""
    count, forbidden = shape
    conditions = [has_trait_id(root_col, root_required_param(i)) for i in range(count)]
    if forbidden:
        conditions.append(~has_trait(root_col, ROOT_FORBIDDEN))
    return sa.and_(*conditions) if conditions else None


@dataclass(frozen=True)
class GroupShape:
    """What a group's SQL looks like, without any of its values."""

    classes: int
    granular: bool
    required: int
    forbidden: bool
    member_of: int
    forbidden_aggs: bool
    tree_root: bool


def group_shape(group: GroupIds) -> GroupShape:
    return GroupShape(classes=len(group.resources), granular=group.same_provider,
                      required=len(group.required), forbidden=bool(group.forbidden),
                      member_of=len(group.member_of), forbidden_aggs=bool(group.forbidden_aggs),
                      tree_root=group.tree_root is not None)


@dataclass(frozen=True)
class GroupBinds:
    """The names of one group's bound parameters.

    The statement builders (``_provider_filters``, ``single_statement``,
    ``_match_statement``) take their parameter names from here, and
    ``values`` fills the same names, so the two cannot drift apart.
    """

    prefix: str

    def resource_class(self, i: int) -> str:
        return f"{self.prefix}rc{i}"

    def amount(self, i: int) -> str:
        return f"{self.prefix}amount{i}"

    def required(self, i: int) -> str:
        return f"{self.prefix}req{i}"

    def member_of(self, i: int) -> str:
        return f"{self.prefix}mem{i}"

    @property
    def forbidden(self) -> str:
        return f"{self.prefix}forb"

    @property
    def forbidden_aggs(self) -> str:
        return f"{self.prefix}faggs"

    @property
    def tree_root(self) -> str:
        return f"{self.prefix}tree"

    def values(self, group: GroupIds) -> dict[str, Any]:
        """Every parameter of ``group``'s statement parts, by name."""
        values: dict[str, Any] = {self.forbidden: list(group.forbidden),
                                  self.forbidden_aggs: list(group.forbidden_aggs),
                                  self.tree_root: group.tree_root}
        for i, (class_id, amount) in enumerate(group.resources):
            values[self.resource_class(i)] = class_id
            values[self.amount(i)] = capacity.requestable(amount)
        for i, traits in enumerate(group.required):
            values[self.required(i)] = list(traits)
        for i, aggs in enumerate(group.member_of):
            values[self.member_of(i)] = list(aggs)
        return values


# The one group of the single-provider path.
SINGLE = GroupBinds("g_")


def _provider_filters(shape: GroupShape, binds: GroupBinds, provider_col) -> list:
    """The group's trait and aggregate filters on one provider."""
    conditions = [has_trait(provider_col, binds.required(i)) for i in range(shape.required)]
    if shape.forbidden:
        conditions.append(~has_trait(provider_col, binds.forbidden))
    conditions += [in_aggregate(provider_col, binds.member_of(i))
                   for i in range(shape.member_of)]
    if shape.forbidden_aggs:
        conditions.append(~in_aggregate(provider_col, binds.forbidden_aggs))
    return conditions


def _member(shape: GroupShape, binds: GroupBinds, col):
    if not shape.member_of:
        return None
    return sa.and_(*[in_aggregate(col, binds.member_of(i)) for i in range(shape.member_of)])


# --- single providers ----------------------------------------------------------

@functools.lru_cache(maxsize=CACHE)
def single_statement(shape: GroupShape, roots: tuple[int, bool], order: str, limit: bool):
    # Providers drive (in id order, so LIMIT stops early); cheap index probes
    # for traits and aggregates come before the capacity checks.
    conditions = []
    if shape.tree_root:
        conditions.append(RP.c.root_provider_id == integer(SINGLE.tree_root))
    conditions += _provider_filters(shape, SINGLE, RP.c.id)
    root_ok = _root_ok(RP.c.root_provider_id, roots)
    if root_ok is not None:
        conditions.append(root_ok)
    for i in range(shape.classes):
        inv = _inventory_alias(i)
        conditions.append(exists(inv.c.resource_provider_id == RP.c.id,
                                 inv.c.resource_class_id == integer(SINGLE.resource_class(i)),
                                 *capacity.room_for(
                                     inv, capacity.amount_param(SINGLE.amount(i)))))
    statement = sa.select(RP.c.id, RP.c.root_provider_id).where(*conditions)
    if order == "random":
        statement = statement.order_by(sa.func.random())
    elif order == "rand":
        statement = statement.order_by(sa.func.rand())
    else:
        statement = statement.order_by(RP.c.id)
    if limit:
        statement = statement.limit(integer(LIMIT))
    return statement


@functools.cache
def _inventory_alias(index: int):
    return t.inventories.alias(f"inv{index}")


def single_providers(conn: sa.Connection, group: GroupIds, roots: Roots, limit: int | None,
                     random_order: bool) -> list[tuple[int, int]]:
    """(provider, root) of providers that serve the whole group alone.

    Used when no nested or sharing provider holds a requested class, so each
    candidate is one provider: the database applies every filter and the
    limit, in provider id order (or at random).
    """
    order = "id"
    if random_order:
        order = "rand" if conn.dialect.name == "mysql" else "random"
    statement = single_statement(group_shape(group), roots.shape(), order, limit is not None)
    params = {**SINGLE.values(group), **root_params(roots), LIMIT: limit}
    return [(row[0], row[1]) for row in conn.execute(statement, params)]


# --- match rows ------------------------------------------------------------

def _flag_bits(shape: GroupShape, binds: GroupBinds, sharing: bool, roots: tuple[int, bool]):
    unsuffixed = not shape.granular
    return bits(
        (has_trait_id(RP.c.id, SHARING_TRAIT_ID) if sharing else None, MatchFlag.SHARING),
        (_root_ok(RP.c.root_provider_id, roots), MatchFlag.ROOT_OK),
        (_member(shape, binds, RP.c.id) if unsuffixed else None, MatchFlag.MEMBER),
        (_member(shape, binds, RP.c.root_provider_id) if unsuffixed else None,
         MatchFlag.ROOT_MEMBER),
        (in_aggregate(RP.c.root_provider_id, binds.forbidden_aggs)
         if unsuffixed and shape.forbidden_aggs else None, MatchFlag.ROOT_BAD),
    )


def _escape(shape: GroupShape, binds: GroupBinds, sharing: bool):
    """A sharing provider may serve other trees: its own root does not decide.

    Not so for the unsuffixed group with in_tree (sharing is then ignored).
    """
    if not sharing or (not shape.granular and shape.tree_root):
        return None
    escape = has_trait_id(RP.c.id, SHARING_TRAIT_ID)
    if not shape.granular and shape.member_of:
        escape = sa.and_(escape, _member(shape, binds, RP.c.id))
    return escape


def _root_gate(shape: GroupShape, binds: GroupBinds, sharing: bool, roots: tuple[int, bool]):
    root_ok = _root_ok(RP.c.root_provider_id, roots)
    if root_ok is None:
        return None
    escape = _escape(shape, binds, sharing)
    return root_ok if escape is None else sa.or_(root_ok, escape)


def _unsuffixed_filters(shape: GroupShape, binds: GroupBinds, sharing: bool) -> list:
    """Prefilters of the unsuffixed group; Python finishes the job.

    Its required traits are judged on the chosen providers together, so only
    forbidden traits and aggregates exclude a provider outright here.
    """
    conditions = []
    if shape.forbidden:
        conditions.append(~has_trait(RP.c.id, binds.forbidden))
    if shape.forbidden_aggs:
        conditions.append(~in_aggregate(RP.c.id, binds.forbidden_aggs))
    local = []
    if shape.member_of:
        # An aggregate on the root spans the whole tree.
        local.append(sa.or_(_member(shape, binds, RP.c.id),
                            _member(shape, binds, RP.c.root_provider_id)))
    if shape.forbidden_aggs:
        local.append(~in_aggregate(RP.c.root_provider_id, binds.forbidden_aggs))
    if local:
        escape = _escape(shape, binds, sharing)
        conditions.append(sa.and_(*local) if escape is None
                          else sa.or_(sa.and_(*local), escape))
    return conditions


@functools.lru_cache(maxsize=CACHE)
def _match_statement(shapes: tuple[GroupShape, ...], sharing: bool, roots: tuple[int, bool],
                     trait_bits: int, canonical: tuple[int, ...]):
    selects = []
    part = 0
    null = sa.cast(sa.null(), sa.Integer)
    for index, shape in enumerate(shapes):
        binds = GroupBinds(f"g{index}_")
        gate = _root_gate(shape, binds, sharing, roots)
        flags = _flag_bits(shape, binds, sharing, roots).label("flags")
        if not shape.classes:
            conditions = _provider_filters(shape, binds, RP.c.id) + [gate]
            if canonical[part] != part:
                part += 1
                continue
            selects.append(sa.select(
                sa.literal_column(str(part)).label("part"), RP.c.id.label("provider"),
                RP.c.root_provider_id.label("root"), null.label("class_id"),
                null.label("total"), null.label("reserved"),
                sa.cast(sa.null(), sa.Float).label("ratio"), null.label("max_unit"),
                null.label("used"), sa.literal_column("0").label("traits"), flags,
            ).where(*[c for c in conditions if c is not None]))
            part += 1
            continue
        if shape.granular:
            filters = _provider_filters(shape, binds, RP.c.id)
            traits: sa.ColumnElement[int] = sa.literal_column("0")
        else:
            filters = _unsuffixed_filters(shape, binds, sharing)
            traits = bits(*[(has_trait_id(RP.c.id, trait_bit_param(i)), 1 << i)
                             for i in range(trait_bits)])
        for i in range(shape.classes):
            if canonical[part] != part:
                part += 1
                continue
            conditions = [INV.c.resource_class_id == integer(binds.resource_class(i)),
                          *capacity.room_for(INV, capacity.amount_param(binds.amount(i))),
                          *filters, gate]
            if shape.tree_root:
                conditions.append(RP.c.root_provider_id == integer(binds.tree_root))
            selects.append(sa.select(
                sa.literal_column(str(part)).label("part"), RP.c.id.label("provider"),
                RP.c.root_provider_id.label("root"), INV.c.resource_class_id.label("class_id"),
                INV.c.total, INV.c.reserved, INV.c.allocation_ratio.label("ratio"),
                INV.c.max_unit, capacity.usage(INV).label("used"), traits.label("traits"),
                flags,
            ).select_from(INV.join(RP, RP.c.id == INV.c.resource_provider_id))
                .where(*[c for c in conditions if c is not None]))
            part += 1
    return selects[0] if len(selects) == 1 else sa.union_all(*selects)


def match(conn: sa.Connection, groups: list[GroupIds], sharing_trait: int | None,
          roots: Roots, unsuffixed_traits: list[int]) -> list[MatchRow]:
    """Rows for every (group, class) part, or (group) for a resourceless group.

    Part numbers are assigned in order: for each group, one per class, or
    one for a resourceless group. A part equal to an earlier one (see
    ``canonical_parts``: several groups asking for one device each, say)
    is not asked again. ``unsuffixed_traits`` are the trait ids whose
    presence is reported as bits of ``traits`` (bit i = trait i).
    """
    statement = _match_statement(tuple(group_shape(g) for g in groups),
                                 sharing_trait is not None, roots.shape(),
                                 len(unsuffixed_traits), tuple(canonical_parts(groups)))
    params = {SHARING_TRAIT_ID: sharing_trait, **root_params(roots)}
    for index, group in enumerate(groups):
        params.update(GroupBinds(f"g{index}_").values(group))
    params.update({trait_bit_param(i): trait for i, trait in enumerate(unsuffixed_traits)})
    rows = []
    for (part, provider, root, class_id, total, reserved, ratio, max_unit, in_use, traits,
         flags) in conn.execute(statement, params).fetchall():
        room = 0
        if class_id is not None:
            room = capacity.room(int(in_use), capacity.capacity(total, reserved, ratio),
                                 max_unit)
        rows.append(MatchRow(int(part), provider, root, class_id, room, int(traits),
                             int(flags)))
    return rows


# --- sharing, tree shape, summaries -----------------------------------------

@functools.lru_cache(maxsize=16)
def _anchors_statement(roots: tuple[int, bool], forbidden_aggs: bool):
    shared = t.resource_provider_aggregates.alias("shared")
    peer = t.resource_provider_aggregates.alias("peer")
    member = t.resource_providers.alias("member")
    root_col = member.c.root_provider_id
    bad = in_aggregate(root_col, "faggs") if forbidden_aggs else None
    return sa.select(
        shared.c.resource_provider_id, root_col,
        bits((_root_ok(root_col, roots), AnchorFlag.ROOT_OK), (bad, AnchorFlag.BAD)).label("flags"),
    ).select_from(
        shared.join(peer, peer.c.aggregate_id == shared.c.aggregate_id)
        .join(member, member.c.id == peer.c.resource_provider_id)
    ).where(shared.c.resource_provider_id.in_(ids("providers"))).distinct()


def sharing_anchors(conn: sa.Connection, providers: Iterable[int], roots: Roots,
                    forbidden_aggs: frozenset[int]) -> dict[int, list[Anchor]]:
    """For each sharing provider, the roots of trees that share an aggregate with it."""
    statement = _anchors_statement(roots.shape(), bool(forbidden_aggs))
    found: dict[int, list[Anchor]] = {}
    for chunk in chunks(sorted(set(providers))):
        params = {"providers": chunk, "faggs": list(forbidden_aggs), **root_params(roots)}
        for provider, root, flags in conn.execute(statement, params):
            found.setdefault(provider, []).append(
                Anchor(root=root, root_ok=not roots or bool(flags & AnchorFlag.ROOT_OK),
                       bad=bool(flags & AnchorFlag.BAD)))
    for anchors in found.values():
        anchors.sort(key=lambda anchor: anchor.root)
    return found


_PARENTS = sa.select(RP.c.id, RP.c.parent_provider_id).where(
    RP.c.root_provider_id.in_(ids("roots")))


def tree_parents(conn: sa.Connection, roots: Iterable[int]) -> dict[int, int | None]:
    """provider -> parent for every provider of the given trees."""
    parents: dict[int, int | None] = {}
    for chunk in chunks(sorted(set(roots))):
        parents.update({row[0]: row[1] for row in conn.execute(_PARENTS, {"roots": chunk})})
    return parents


