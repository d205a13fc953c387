"""Resource providers: the rows, the tree rules and the provider generation.

The generation rule, once: a client that sends a provider generation must
send the current one (``check_generation``), and every change to what a
provider has (inventories, traits, aggregates from 1.19, allocations)
compare-and-sets it one higher in the same transaction
(``bump_generation``); losing that compare-and-set is a ``Race``, and the
write runs again in a new transaction.
"""

from __future__ import annotations

import datetime
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from allotment.db import tables as t
from allotment.ledger import capacity
from allotment.ledger.common import aggregate_ids, class_ids, trait_ids, utcnow
from allotment.ledger.errors import (
    DuplicateProvider,
    InvalidNewProvider,
    InvalidTreeChange,
    ProviderGenerationConflict,
    ProviderHasChildren,
    ProviderInUse,
    ProviderNotFound,
    Race,
    UnknownResourceClass,
    UnknownTraits,
)
from allotment.ledger.filters import AggregateFilter, TraitFilter

_rp = t.resource_providers.alias("rp")
_root = t.resource_providers.alias("root_rp")


@dataclass(frozen=True)
class Provider:
    id: int
    uuid: str
    name: str
    generation: int
    root_id: int
    parent_id: int | None
    root_uuid: str
    parent_uuid: str | None
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None


def _select() -> sa.Select:
    """Providers with their root's and parent's uuid, each looked up by id.

    Lookups in the select list, not joins: a correlated scalar subquery is
    an index probe per row whatever the planner knows, where joins were
    planned as hash joins over every provider on a database without
    statistics (tests/test_plans_without_statistics.py).
    """
    def uuid_of(link: sa.Column[Any], label: str) -> sa.Label[Any]:
        return (sa.select(_root.c.uuid).where(_root.c.id == link)
                .scalar_subquery().label(label))
    return sa.select(_rp.c.id, _rp.c.uuid, _rp.c.name, _rp.c.generation,
                     _rp.c.root_provider_id, _rp.c.parent_provider_id,
                     uuid_of(_rp.c.root_provider_id, "root_uuid"),
                     uuid_of(_rp.c.parent_provider_id, "parent_uuid"),
                     _rp.c.created_at, _rp.c.updated_at
                     ).where(_rp.c.root_provider_id.is_not(None))  # as the join to the root did


def _to_provider(row: sa.Row[Any]) -> Provider:
    return Provider(id=row.id, uuid=row.uuid, name=row.name, generation=row.generation,
                    root_id=row.root_provider_id, parent_id=row.parent_provider_id,
                    root_uuid=row.root_uuid, parent_uuid=row.parent_uuid,
                    created_at=row.created_at, updated_at=row.updated_at)


def normalize_uuid(value: str) -> str:
    """The canonical (dashed, lower-case) spelling of a uuid-like string."""
    return str(uuidlib.UUID(value))


# Built once: a statement object keeps its SQL and cache key, where one
# built per call costs more CPU than a provider's whole read (issue 40).
_BY_UUID = _select().where(_rp.c.uuid == sa.bindparam("uuid"))


# The provider a read of one provider's traits, aggregates or allocations
# starts from, and what makes it a provider (as ``_BY_UUID``): reading it in
# the same statement as what it has saves the round trip of ``require``.
PROVIDER_BY_UUID = t.resource_providers.alias("provider")


def by_uuid_conditions(rp: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """``rp``'s row of the provider with the uuid bound as ``uuid``."""
    return (rp.c.uuid == sa.bindparam("uuid"), rp.c.root_provider_id.is_not(None))


def get(conn: sa.Connection, uuid: str) -> Provider | None:
    row = conn.execute(_BY_UUID, {"uuid": uuid}).first()
    return _to_provider(row) if row else None


def require(conn: sa.Connection, uuid: str) -> Provider:
    """The provider with ``uuid``; ``ProviderNotFound`` otherwise."""
    provider = get(conn, uuid)
    if provider is None:
        raise ProviderNotFound(uuid)
    return provider


def check_generation(provider: Provider, given: int) -> None:
    """``ProviderGenerationConflict`` unless the client sent the current generation."""
    if provider.generation != given:
        raise ProviderGenerationConflict(provider.uuid, provider.generation, given)


def bump_generation(conn: sa.Connection, provider: Provider) -> int:
    """Compare-and-set the generation read in ``provider`` one higher.

    ``Race`` when somebody else changed the provider since it was read.
    """
    result = conn.execute(
        t.resource_providers.update()
        .where(t.resource_providers.c.id == provider.id,
               t.resource_providers.c.generation == provider.generation)
        .values(generation=provider.generation + 1, updated_at=utcnow()))
    if result.rowcount != 1:
        raise Race(f"provider {provider.uuid} changed")
    return provider.generation + 1


def create(conn: sa.Connection, name: str, uuid: str | None,
           parent_uuid: str | None) -> Provider:
    """A new provider (a root, or a child of ``parent_uuid``).

    A name or uuid taken meanwhile by a concurrent create is a duplicate key,
    which the retry loop treats as a lost race: the next attempt finds the
    winner's row and refuses with ``DuplicateProvider``.
    """
    uuid = normalize_uuid(uuid) if uuid else str(uuidlib.uuid4())
    if not name:
        raise InvalidNewProvider(name, uuid, "no_name")
    parent = None
    if parent_uuid is not None:
        parent_uuid = normalize_uuid(parent_uuid)
        if parent_uuid == uuid:
            raise InvalidNewProvider(name, uuid, "own_parent")
        parent = get(conn, parent_uuid)
        if parent is None:
            raise InvalidNewProvider(name, uuid, "no_parent")
    _refuse_duplicates(conn, name=name, uuid=uuid)
    result = conn.execute(t.resource_providers.insert().values(
        uuid=uuid, name=name, generation=0, created_at=utcnow(),
        parent_provider_id=parent.id if parent else None,
        root_provider_id=parent.root_id if parent else None))
    new_id = result.inserted_primary_key[0]  # type: ignore[index]
    if parent is None:
        conn.execute(t.resource_providers.update()
                     .where(t.resource_providers.c.id == new_id)
                     .values(root_provider_id=new_id))
    return require(conn, uuid)


def _refuse_duplicates(conn: sa.Connection, name: str | None, uuid: str | None,
                       except_id: int | None = None) -> None:
    rp = t.resource_providers
    if uuid is not None:
        row = conn.execute(sa.select(rp.c.id).where(rp.c.uuid == uuid)).first()
        if row and row.id != except_id:
            raise DuplicateProvider("uuid", uuid)
    if name is not None:
        row = conn.execute(sa.select(rp.c.id).where(rp.c.name == name)).first()
        if row and row.id != except_id:
            raise DuplicateProvider("name", name)


def update(conn: sa.Connection, uuid: str, name: str, *, move: bool = False,
           parent_uuid: str | None = None, allow_reparenting: bool = False) -> Provider:
    """Rename a provider and, with ``move``, put it (and its subtree) under ``parent_uuid``.

    ``parent_uuid`` None with ``move`` makes it a root. Before 1.37
    (``allow_reparenting`` False) only a root may be given a parent.
    """
    provider = require(conn, uuid)
    values: dict[str, Any] = {"name": name, "updated_at": utcnow()}
    new_root_id = None
    if move and parent_uuid is not None:
        parent = get(conn, parent_uuid)
        if parent is None:
            raise InvalidTreeChange(uuid, "no_parent")
        if (provider.parent_id is not None and provider.parent_id != parent.id
                and not allow_reparenting):
            raise InvalidTreeChange(uuid, "reparent")
        if provider.parent_id != parent.id:
            if parent.id in subtree_ids(conn, provider.id):
                raise InvalidTreeChange(uuid, "loop")
            values["parent_provider_id"] = parent.id
            new_root_id = parent.root_id
    elif move and provider.parent_id is not None:
        if not allow_reparenting:
            raise InvalidTreeChange(uuid, "unparent")
        values["parent_provider_id"] = None
        new_root_id = provider.id
    if name != provider.name:
        _refuse_duplicates(conn, name=name, uuid=None, except_id=provider.id)
    conn.execute(t.resource_providers.update()
                 .where(t.resource_providers.c.id == provider.id).values(**values))
    if new_root_id is not None and new_root_id != provider.root_id:
        ids = subtree_ids(conn, provider.id)
        conn.execute(t.resource_providers.update()
                     .where(t.resource_providers.c.id.in_(ids))
                     .values(root_provider_id=new_root_id))
    return require(conn, uuid)


def subtree_ids(conn: sa.Connection, provider_id: int) -> set[int]:
    """The provider and all its descendants."""
    rp = t.resource_providers
    rows = conn.execute(sa.select(rp.c.id, rp.c.parent_provider_id).where(
        rp.c.root_provider_id == sa.select(rp.c.root_provider_id)
        .where(rp.c.id == provider_id).scalar_subquery())).all()
    children: dict[int | None, list[int]] = {}
    for row in rows:
        children.setdefault(row.parent_provider_id, []).append(row.id)
    found = {provider_id}
    stack = [provider_id]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def delete(conn: sa.Connection, uuid: str) -> None:
    """Delete a provider without children or allocations, with what it has."""
    provider = require(conn, uuid)
    rp = t.resource_providers
    has_child = conn.execute(
        sa.select(rp.c.id).where(rp.c.parent_provider_id == provider.id).limit(1)).first()
    if has_child:
        raise ProviderHasChildren(uuid)
    in_use = conn.execute(
        sa.select(t.allocations.c.id)
        .where(t.allocations.c.resource_provider_id == provider.id).limit(1)).first()
    if in_use:
        raise ProviderInUse(uuid)
    conn.execute(t.inventories.delete()
                 .where(t.inventories.c.resource_provider_id == provider.id))
    conn.execute(t.resource_provider_traits.delete()
                 .where(t.resource_provider_traits.c.resource_provider_id == provider.id))
    conn.execute(t.resource_provider_aggregates.delete()
                 .where(t.resource_provider_aggregates.c.resource_provider_id == provider.id))
    # MySQL checks the self-referencing root FK row by row: unlink it first.
    result = conn.execute(rp.update().where(rp.c.id == provider.id,
                                            rp.c.generation == provider.generation)
                          .values(root_provider_id=None))
    if result.rowcount == 1:
        result = conn.execute(rp.delete().where(rp.c.id == provider.id))
    if result.rowcount != 1:
        raise Race(f"provider {uuid} changed while being deleted")


@dataclass
class ProviderQuery:
    name: str | None = None
    uuid: str | None = None
    in_tree: str | None = None
    member_of: AggregateFilter | None = None
    required: TraitFilter | None = None
    resources: dict[str, int] | None = None


@dataclass(frozen=True)
class _Membership:
    """A filter on providers: those with a row of ``table`` (its provider
    column ``provider``) that meets ``conditions``, looked up by ``key`` (the
    first column of the index that finds those rows)."""

    table: Any
    provider: Any
    conditions: tuple[sa.ColumnElement[bool], ...]
    key: Any

    def members(self) -> sa.Select:
        """The ids of the providers that pass, as a subquery to read once."""
        return sa.select(self.provider).where(*self.conditions)

    def first_members(self, count: int) -> sa.Select:
        """The first ``count`` members in the order of ``key``'s index. Only
        that index's order lets the read stop after ``count`` entries: a
        sequential scan must sort every match first. Without the order,
        PostgreSQL with statistics took a trait's few members for a quarter
        of the table and scanned it all, betting on meeting ``count`` rows
        early (the cloud day went down after ANALYZE)."""
        return self.members().order_by(self.key).limit(count)

    def rows_of_provider(self) -> sa.ScalarSelect[int]:
        """How many rows the provider at hand has that meet the conditions: a
        count by the provider index, run per provider (never a join)."""
        return sa.select(sa.func.count()).select_from(self.table).where(
            self.provider == _rp.c.id, *self.conditions).scalar_subquery()


def list_providers(conn: sa.Connection, q: ProviderQuery) -> list[Provider]:
    """The providers that pass every filter of ``q``, in id order.

    ``UnknownTraits`` / ``UnknownResourceClass`` for names that do not exist;
    an unknown aggregate or ``in_tree`` provider just matches nothing.

    Without ``resources``, one statement built once per shape of the query
    (which filters, how many groups) answers, trait names and aggregate uuids
    looked up inside it (``_shaped``); the checks ``_list_built`` makes
    before it are made after, from what it read, in the same order.
    """
    if q.resources:
        return _list_built(conn, q)
    shaped = _shaped(conn.dialect.name, q)
    if shaped is None:
        return _list_built(conn, q)
    statement, params = shaped
    rows = conn.execute(statement, params).all()
    names = q.required.names() if q.required else set()
    found = [row for row in rows if row.id is not None]
    if names:
        known = next(row.known_traits for row in rows if row.id is None)
        if known != len(names):
            if not found and q.in_tree is not None and get(conn, q.in_tree) is None:
                return []
            raise UnknownTraits(names - set(trait_ids(conn, names)))
    return [_to_provider(row) for row in found]


# One built statement per shape of provider query, and how many shapes are
# kept (the number of aggregates in each group is part of the shape).
_SHAPES: dict[tuple[Any, ...], sa.Select | sa.CompoundSelect] = {}
_MAX_SHAPES = 512


def _shaped(dialect: str, q: ProviderQuery
            ) -> tuple[sa.Select | sa.CompoundSelect, dict[str, Any]] | None:
    """The statement for ``q``'s shape, and ``q``'s values for its parameters;
    None for a query too big to be given a shape of its own."""
    params: dict[str, Any] = {}
    if q.name is not None:
        params["name"] = q.name
    if q.uuid is not None:
        params["uuid"] = q.uuid
    if q.in_tree is not None:
        params["in_tree"] = q.in_tree
    traits = q.required or TraitFilter()
    member_of = q.member_of or AggregateFilter()
    for i, group in enumerate(traits.required):
        params[f"trait_{i}"] = sorted(group)
    if traits.forbidden:
        params["no_trait"] = sorted(traits.forbidden)
    names = traits.names()
    if names:
        params["trait_names"] = sorted(names)
    agg_sizes = tuple(len(group) for group in member_of.required)
    if sum(agg_sizes) + len(member_of.forbidden) > _PROBES:
        return None
    for i, group in enumerate(member_of.required):
        params.update((f"agg_{i}_{j}", u) for j, u in enumerate(sorted(group)))
    params.update((f"no_agg_{j}", u) for j, u in enumerate(sorted(member_of.forbidden)))
    shape = (dialect, q.name is not None, q.uuid is not None, q.in_tree is not None,
             len(traits.required), bool(traits.forbidden), agg_sizes,
             len(member_of.forbidden))
    statement = _SHAPES.get(shape)
    if statement is None:
        statement = _build_shape(*shape)
        if len(_SHAPES) < _MAX_SHAPES:
            _SHAPES[shape] = statement
    return statement, params


_PROBES = 200
_NAMES = postgresql.ARRAY(sa.String)


def _build_shape(dialect: str, by_name: bool, by_uuid: bool, in_tree: bool,
                 trait_groups: int, no_traits: bool, agg_sizes: tuple[int, ...],
                 no_aggs: int) -> sa.Select | sa.CompoundSelect:
    """The statement of one shape of provider query, its values left as
    parameters: ``_list_built``'s, with each trait name and aggregate uuid
    looked up where it is used.

    On PostgreSQL a set of ids looked up is ``= ANY(ARRAY(...))``, read once
    before the rest, and trait names come as an array; elsewhere ``IN
    (...)``. Aggregates are looked up as one equality per uuid (as
    ``common.aggregate_ids`` does) so that each is a probe of the unique
    index. With traits, a second arm adds one row (its
    id NULL) that counts the trait names that exist: the check that no
    name is unknown, made without a statement of its own.
    """
    pg = dialect == "postgresql"
    rpt, rpa = t.resource_provider_traits, t.resource_provider_aggregates
    trait, agg = t.traits, t.placement_aggregates

    def ids_in(column: Any, ids: sa.Select) -> sa.ColumnElement[bool]:
        if pg:
            return column == sa.any_(sa.func.array(ids.scalar_subquery()))
        return column.in_(ids)

    def names_in(param: str) -> sa.ColumnElement[bool]:
        # An array parameter on PostgreSQL: no IN list rendered per execution.
        if pg:
            return trait.c.name == sa.any_(sa.bindparam(param, type_=_NAMES))
        return trait.c.name.in_(sa.bindparam(param, expanding=True))

    def trait_ids_of(param: str) -> sa.Select:
        return _looked_up(pg, param, sa.select(trait.c.id).where(names_in(param)))

    def agg_ids_of(name: str, params: list[str]) -> sa.Select:
        arms = [sa.select(agg.c.id).where(agg.c.uuid == sa.bindparam(p)) for p in params]
        return _looked_up(pg, name, arms[0] if len(arms) == 1 else sa.select(
            sa.union_all(*arms).subquery().c.id))

    sel = _select()
    if by_name:
        sel = sel.where(_rp.c.name == sa.bindparam("name"))
    if by_uuid:
        sel = sel.where(_rp.c.uuid == sa.bindparam("uuid"))
    if in_tree:
        tree = t.resource_providers.alias("tree")
        sel = sel.where(_rp.c.root_provider_id == sa.select(tree.c.root_provider_id).where(
            tree.c.uuid == sa.bindparam("in_tree"),
            tree.c.root_provider_id.is_not(None)).scalar_subquery())
    required: list[_Membership] = []
    forbidden: list[_Membership] = []
    # Aggregates first, as in ``_list_built``.
    for i, size in enumerate(agg_sizes):
        required.append(_Membership(rpa, rpa.c.resource_provider_id, (ids_in(
            rpa.c.aggregate_id, agg_ids_of(f"aggs_{i}", [f"agg_{i}_{j}" for j in range(size)])),),
            rpa.c.aggregate_id))
    required.extend(_Membership(rpt, rpt.c.resource_provider_id, (
        ids_in(rpt.c.trait_id, trait_ids_of(f"trait_{i}")),), rpt.c.trait_id)
        for i in range(trait_groups))
    if no_aggs:
        forbidden.append(_Membership(rpa, rpa.c.resource_provider_id, (ids_in(
            rpa.c.aggregate_id, agg_ids_of("no_aggs", [f"no_agg_{j}" for j in range(no_aggs)])),),
            rpa.c.aggregate_id))
    if no_traits:
        forbidden.append(_Membership(rpt, rpt.c.resource_provider_id, (
            ids_in(rpt.c.trait_id, trait_ids_of("no_trait")),), rpt.c.trait_id))
    sel = _narrowed(dialect, sel, required, forbidden, by_name or by_uuid or in_tree)
    if not (trait_groups or no_traits):
        return sel.add_columns(sa.null().label("known_traits")).order_by(_rp.c.id)
    sel = sel.add_columns(sa.null().label("known_traits"))
    count = sa.select(*(sa.null().label(c.name) for c in sel.selected_columns[:-1]),
                      sa.func.count().label("known_traits")).select_from(trait).where(
        names_in("trait_names"))
    union: sa.CompoundSelect = sa.union_all(sel, count)
    return union.order_by(union.selected_columns.id)


def _looked_up(pg: bool, name: str, ids: sa.Select) -> sa.Select:
    """``ids`` as the subquery of a filter. On PostgreSQL a filter appears in
    several places of the statement (``_narrowed``): as a CTE its ids are
    looked up, and planned, once."""
    if not pg:
        return ids
    return sa.select(ids.cte(name).c.id)


def _list_built(conn: sa.Connection, q: ProviderQuery) -> list[Provider]:
    """``list_providers``, its statement built for the request, names and
    uuids looked up first: for queries with ``resources`` or too many
    aggregates to have a shape."""
    sel = _select()
    if q.name is not None:
        sel = sel.where(_rp.c.name == q.name)
    if q.uuid is not None:
        sel = sel.where(_rp.c.uuid == q.uuid)
    if q.in_tree is not None:
        tree = get(conn, q.in_tree)
        if tree is None:
            return []
        sel = sel.where(_rp.c.root_provider_id == tree.root_id)
    required: list[_Membership] = []
    forbidden: list[_Membership] = []
    if q.required:
        _with_traits(conn, q.required, required, forbidden)
    # Aggregates go first: the narrowest filter in practice (nova's sharing
    # providers: those in its host's aggregates), the one that drives the search.
    if q.member_of and not _with_aggregates(conn, q.member_of, required, forbidden):
        return []
    if q.resources:
        required.extend(_with_resources(conn, q.resources))
    by_key = q.name is not None or q.uuid is not None or q.in_tree is not None
    sel = _narrowed(conn.dialect.name, sel, required, forbidden, by_key)
    sel = sel.order_by(_rp.c.id)
    return [_to_provider(row) for row in conn.execute(sel)]


def _narrowed(dialect: str, sel: sa.Select, required: list[_Membership],
              forbidden: list[_Membership], by_key: bool) -> sa.Select:
    """``sel`` narrowed to the providers that pass every filter.

    MySQL, MariaDB and SQLite run each filter as an IN (NOT IN) subquery,
    read by its index and probed per provider, however little they know of
    the tables. PostgreSQL without statistics planned those semi-joins as
    hash and merge joins over every provider (tests/
    test_plans_without_statistics.py). There, unless the providers are
    already found by a key (name, uuid, tree), the first required filter is
    read once and its providers fetched by id as ``id = ANY(ARRAY(...))``,
    which can only be probes of the primary key. With several required
    filters, one with fewer than ``_FEW`` rows drives: its providers are
    fetched and each probed for the others. Nova's sharing-provider query
    (four aggregates of thousands of hosts, a trait few providers or none
    have) is driven by its trait. Only when every filter has many rows are
    they all read and intersected (INTERSECT), each once by its own index:
    an intersection of the aggregates' 5,700 members with an absent trait
    was nearly half of the database's time in the cloud day at 10,000 hosts.
    A forbidden filter is a count of the provider's own rows by its
    provider index; so is every required one when a key found the providers.
    """
    if dialect != "postgresql":
        return sel.where(*(_rp.c.id.in_(f.members()) for f in required),
                         *(_rp.c.id.not_in(f.members()) for f in forbidden))
    absent = (f.rows_of_provider() == 0 for f in forbidden)
    if by_key or not required:
        return sel.where(*(f.rows_of_provider() > 0 for f in required), *absent)
    if len(required) == 1:
        only = sa.func.array(required[0].members().scalar_subquery())
        return sel.where(_rp.c.id == sa.any_(only), *absent)
    # Which filter drives: the first counted with fewer than _FEW rows, the
    # cheapest counts first (_counting_cost). A CTE referenced several times
    # is computed once; each branch's ARRAY is an initplan, run only if its
    # branch is taken.
    counts = sorted(((i, sa.select(sa.func.count()).select_from(
        f.first_members(_FEW).subquery()).scalar_subquery()) for i, f in enumerate(required)),
        key=lambda counted: _counting_cost(required[counted[0]]))
    choice_cte = sa.select(sa.case(*((c < _FEW, i) for i, c in counts),
                                   else_=-1).label("driver")).cte("driver")
    driver = sa.select(choice_cte.c.driver).scalar_subquery()
    ids = sa.case(
        # Taken only when the driver has fewer than _FEW members: all of them.
        *((driver == i, sa.func.array(f.first_members(_FEW).scalar_subquery()))
          for i, f in enumerate(required)),
        else_=sa.func.array(sa.intersect(*(f.members() for f in required)).scalar_subquery()))
    # The driver's providers are probed for the other filters; the
    # intersection's pass them all already.
    probed = sa.case(
        *((driver == i, sa.and_(*(g.rows_of_provider() > 0
                                  for j, g in enumerate(required) if j != i)))
          for i in range(len(required))),
        else_=sa.true())
    return sel.where(_rp.c.id == sa.any_(ids), probed, *absent)


def _counting_cost(f: _Membership) -> int:
    """How dear counting a filter's first rows is, in order. A trait's count
    stops after _FEW entries of its index when the index is read in order;
    an aggregate's members tend to be read whole into a bitmap first (the
    aggregate's size); each provider counted for resources sums its usage."""
    if f.table is t.resource_provider_traits:
        return 0
    if f.table is t.resource_provider_aggregates:
        return 1
    return 2


# A filter with fewer matching rows than this drives a provider query: its
# providers are fetched and probed for the other filters. Counting up to it
# costs a read of that many index entries, far less than reading thousands
# of aggregate members to intersect them with a trait few providers have.
_FEW = 256


def _with_traits(conn: sa.Connection, traits: TraitFilter, required: list[_Membership],
                 forbidden: list[_Membership]) -> None:
    """The filters of providers with the required traits and none of the forbidden."""
    rpt = t.resource_provider_traits
    names = traits.names()
    ids = trait_ids(conn, names)
    missing = names - set(ids)
    if missing:
        raise UnknownTraits(missing)
    required.extend(_Membership(rpt, rpt.c.resource_provider_id, (
        rpt.c.trait_id.in_([ids[n] for n in group]),), rpt.c.trait_id)
        for group in traits.required)
    if traits.forbidden:
        forbidden.append(_Membership(rpt, rpt.c.resource_provider_id, (
            rpt.c.trait_id.in_([ids[n] for n in traits.forbidden]),), rpt.c.trait_id))


def _with_aggregates(conn: sa.Connection, member_of: AggregateFilter,
                     required: list[_Membership], forbidden: list[_Membership]) -> bool:
    """The filters of members of each required group of aggregates and of none
    of the forbidden ones, put first among ``required``; False when a required
    group names no aggregate that exists (nothing can match)."""
    rpa = t.resource_provider_aggregates
    all_uuids = set(member_of.forbidden)
    for group in member_of.required:
        all_uuids |= group
    agg_map = aggregate_ids(conn, all_uuids)
    groups = []
    for group in member_of.required:
        agg_ids = [agg_map[u] for u in group if u in agg_map]
        if not agg_ids:
            return False
        groups.append(_Membership(rpa, rpa.c.resource_provider_id, (
            rpa.c.aggregate_id.in_(agg_ids),), rpa.c.aggregate_id))
    required[:0] = groups
    forbidden_ids = [agg_map[u] for u in member_of.forbidden if u in agg_map]
    if forbidden_ids:
        forbidden.append(_Membership(rpa, rpa.c.resource_provider_id, (
            rpa.c.aggregate_id.in_(forbidden_ids),), rpa.c.aggregate_id))
    return True


def _with_resources(conn: sa.Connection, resources: dict[str, int]) -> list[_Membership]:
    """The filters of providers with room for each amount of ``resources``."""
    rc_map = class_ids(conn, list(resources))
    for name in resources:
        if name not in rc_map:
            raise UnknownResourceClass(name)
    found = []
    for name, amount in resources.items():
        inv = t.inventories.alias()
        found.append(_Membership(inv, inv.c.resource_provider_id, (
            inv.c.resource_class_id == rc_map[name],
            *capacity.room_for(inv, capacity.requestable(amount))), inv.c.resource_class_id))
    return found
