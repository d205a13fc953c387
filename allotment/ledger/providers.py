"""Resource providers: the rows, the tree rules and generation compare-and-set."""

from __future__ import annotations

import datetime
import uuid as uuidlib
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment import errors
from allotment.db import tables as t
from allotment.filters import AggregateFilter, TraitFilter
from allotment.ledger.common import aggregate_ids, class_ids, is_duplicate, trait_ids, utcnow

_rp = t.resource_providers.alias("rp")
_root = t.resource_providers.alias("root_rp")
_parent = t.resource_providers.alias("parent_rp")


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
    return (
        sa.select(_rp.c.id, _rp.c.uuid, _rp.c.name, _rp.c.generation,
                  _rp.c.root_provider_id, _rp.c.parent_provider_id,
                  _root.c.uuid.label("root_uuid"), _parent.c.uuid.label("parent_uuid"),
                  _rp.c.created_at, _rp.c.updated_at)
        .select_from(_rp.join(_root, _rp.c.root_provider_id == _root.c.id)
                     .outerjoin(_parent, _rp.c.parent_provider_id == _parent.c.id))
    )


def _to_provider(row) -> Provider:
    return Provider(id=row.id, uuid=row.uuid, name=row.name, generation=row.generation,
                    root_id=row.root_provider_id, parent_id=row.parent_provider_id,
                    root_uuid=row.root_uuid, parent_uuid=row.parent_uuid,
                    created_at=row.created_at, updated_at=row.updated_at)


def normalize_uuid(value: str) -> str:
    """The canonical (dashed, lower-case) spelling of a uuid-like string."""
    return str(uuidlib.UUID(value))


def get(conn: sa.Connection, uuid: str) -> Provider | None:
    row = conn.execute(_select().where(_rp.c.uuid == uuid)).first()
    return _to_provider(row) if row else None


def require(conn: sa.Connection, uuid: str, context: str | None = None) -> Provider:
    """The provider with ``uuid``; 404 with upstream's message otherwise.

    ``context`` is the prefix some endpoints put before the message upstream.
    """
    provider = get(conn, uuid)
    if provider is None:
        message = f"No resource provider with uuid {uuid} found"
        raise errors.NotFound(f"{context}: {message}" if context else message)
    return provider


def bump_generation(conn: sa.Connection, provider: Provider) -> int:
    """Compare-and-set the provider's generation; 409 when somebody beat us."""
    result = conn.execute(
        t.resource_providers.update()
        .where(t.resource_providers.c.id == provider.id,
               t.resource_providers.c.generation == provider.generation)
        .values(generation=provider.generation + 1, updated_at=utcnow()))
    if result.rowcount != 1:
        raise errors.ConcurrentUpdate(
            f"resource provider generation conflict: provider {provider.uuid} was "
            "changed by another request. Please update the generation and try again.")
    return provider.generation + 1


def check_generation(provider: Provider, generation: int) -> None:
    """Refuse a write whose client-supplied generation is stale."""
    if provider.generation != generation:
        raise errors.ConcurrentUpdate(
            "resource provider generation conflict: the provider's generation is "
            f"{provider.generation}, not {generation}. Please update the generation "
            "and try again.")


def create(conn: sa.Connection, name: str, uuid: str | None,
           parent_uuid: str | None) -> Provider:
    uuid = normalize_uuid(uuid) if uuid else str(uuidlib.uuid4())
    parent = None
    if parent_uuid is not None:
        parent_uuid = normalize_uuid(parent_uuid)
        if parent_uuid == uuid:
            raise errors.BadRequest(
                "Unable to create resource provider \"%s\", %s: parent provider UUID "
                "cannot be same as UUID. Please choose a different parent provider "
                "UUID." % (name, uuid))
        parent = get(conn, parent_uuid)
        if parent is None:
            raise errors.BadRequest(
                "Unable to create resource provider \"%s\", %s: parent provider UUID "
                "does not exist." % (name, uuid))
    _refuse_duplicates(conn, name=name, uuid=uuid)
    now = utcnow()
    try:
        result = conn.execute(t.resource_providers.insert().values(
            uuid=uuid, name=name, generation=0, created_at=now,
            parent_provider_id=parent.id if parent else None,
            root_provider_id=parent.root_id if parent else None))
    except IntegrityError as exc:
        if is_duplicate(exc):
            _refuse_duplicates(conn, name=name, uuid=uuid)
            raise errors.Conflict(f"Conflicting resource provider {name} already exists.",
                                  code=errors.DUPLICATE_NAME) from None
        raise
    new_id = result.inserted_primary_key[0]
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
            raise errors.Conflict(
                f"Conflicting resource provider uuid: {uuid} already exists.",
                code=errors.DUPLICATE_NAME)
    if name is not None:
        row = conn.execute(sa.select(rp.c.id).where(rp.c.name == name)).first()
        if row and row.id != except_id:
            raise errors.Conflict(
                f"Conflicting resource provider name: {name} already exists.",
                code=errors.DUPLICATE_NAME)


_UNSET = object()


def update(conn: sa.Connection, uuid: str, name: str,
           parent_uuid: str | None | object = _UNSET,
           allow_reparenting: bool = False) -> Provider:
    """Rename and/or move a provider (and its subtree) in the tree."""
    provider = require(conn, uuid)
    values: dict = {"name": name, "updated_at": utcnow()}
    new_root_id = None
    if parent_uuid is not _UNSET:
        if parent_uuid is not None:
            parent = get(conn, parent_uuid)
            if parent is None:
                raise errors.BadRequest(
                    "Unable to save resource provider %s: Object action update failed "
                    "because: parent provider UUID does not exist." % uuid)
            if (provider.parent_id is not None and provider.parent_id != parent.id
                    and not allow_reparenting):
                raise errors.BadRequest(
                    "Unable to save resource provider %s: Object action update failed "
                    "because: re-parenting a provider is not currently allowed." % uuid)
            if provider.parent_id != parent.id:
                if parent.id in subtree_ids(conn, provider.id):
                    raise errors.BadRequest(
                        "Unable to save resource provider %s: Object action update "
                        "failed because: creating loop in the provider tree is not "
                        "allowed." % uuid)
                values["parent_provider_id"] = parent.id
                new_root_id = parent.root_id
        elif provider.parent_id is not None:
            if not allow_reparenting:
                raise errors.BadRequest(
                    "Unable to save resource provider %s: Object action update failed "
                    "because: un-parenting a provider is not currently allowed." % uuid)
            values["parent_provider_id"] = None
            new_root_id = provider.id
    if name != provider.name:
        _refuse_duplicates(conn, name=name, uuid=None, except_id=provider.id)
    try:
        conn.execute(t.resource_providers.update()
                     .where(t.resource_providers.c.id == provider.id).values(**values))
    except IntegrityError as exc:
        if is_duplicate(exc):
            raise errors.Conflict(
                f"Conflicting resource provider name: {name} already exists.",
                code=errors.DUPLICATE_NAME) from None
        raise
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
    provider = get(conn, uuid)
    if provider is None:
        raise errors.NotFound(f"No resource provider with uuid {uuid} found for delete")
    rp = t.resource_providers
    has_child = conn.execute(
        sa.select(rp.c.id).where(rp.c.parent_provider_id == provider.id).limit(1)).first()
    if has_child:
        raise errors.Conflict(
            f"Unable to delete parent resource provider {uuid}: It has child resource "
            "providers.", code=errors.PROVIDER_CANNOT_DELETE_PARENT)
    in_use = conn.execute(
        sa.select(t.allocations.c.id)
        .where(t.allocations.c.resource_provider_id == provider.id).limit(1)).first()
    if in_use:
        raise errors.Conflict(
            f"Unable to delete resource provider {uuid}: Resource provider has "
            "allocations.", code=errors.PROVIDER_IN_USE)
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
        raise errors.ConcurrentUpdate(
            f"resource provider {uuid} was changed by another request while being deleted.")


@dataclass
class ProviderQuery:
    name: str | None = None
    uuid: str | None = None
    in_tree: str | None = None
    member_of: AggregateFilter | None = None
    required: TraitFilter | None = None
    resources: dict[str, int] | None = None


def usage_subquery(class_id_list: list[int] | None = None) -> sa.Subquery:
    """Per (provider, class): the sum of allocated amounts."""
    alloc = t.allocations
    sel = sa.select(alloc.c.resource_provider_id, alloc.c.resource_class_id,
                    sa.func.sum(alloc.c.used).label("used"))
    if class_id_list is not None:
        sel = sel.where(alloc.c.resource_class_id.in_(class_id_list))
    return sel.group_by(alloc.c.resource_provider_id, alloc.c.resource_class_id).subquery()


def capacity_clause(inv, usage, amount: int):
    """SQL: the inventory row can take ``amount`` more (upstream's rules)."""
    return sa.and_(
        sa.func.coalesce(usage.c.used, 0) + amount
        <= (inv.c.total - inv.c.reserved) * inv.c.allocation_ratio,
        inv.c.min_unit <= amount,
        inv.c.max_unit >= amount,
        amount % inv.c.step_size == 0,
    )


def list_providers(conn: sa.Connection, q: ProviderQuery) -> list[Provider]:
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
    rpt = t.resource_provider_traits
    if q.required:
        names = q.required.names()
        ids = trait_ids(conn, names)
        missing = sorted(names - set(ids))
        if missing:
            raise errors.BadRequest(f"No such trait(s): {', '.join(missing)}.")
        for group in q.required.required:
            sel = sel.where(_rp.c.id.in_(
                sa.select(rpt.c.resource_provider_id)
                .where(rpt.c.trait_id.in_([ids[n] for n in group]))))
        if q.required.forbidden:
            sel = sel.where(_rp.c.id.not_in(
                sa.select(rpt.c.resource_provider_id)
                .where(rpt.c.trait_id.in_([ids[n] for n in q.required.forbidden]))))
    rpa = t.resource_provider_aggregates
    if q.member_of:
        all_uuids = set(q.member_of.forbidden)
        for group in q.member_of.required:
            all_uuids |= group
        agg_map = aggregate_ids(conn, all_uuids)
        for group in q.member_of.required:
            ids = [agg_map[u] for u in group if u in agg_map]
            if not ids:
                return []
            sel = sel.where(_rp.c.id.in_(
                sa.select(rpa.c.resource_provider_id).where(rpa.c.aggregate_id.in_(ids))))
        forbidden_ids = [agg_map[u] for u in q.member_of.forbidden if u in agg_map]
        if forbidden_ids:
            sel = sel.where(_rp.c.id.not_in(
                sa.select(rpa.c.resource_provider_id)
                .where(rpa.c.aggregate_id.in_(forbidden_ids))))
    if q.resources:
        rc_map = class_ids(conn, list(q.resources))
        for name in q.resources:
            if name not in rc_map:
                raise errors.BadRequest(
                    f"Invalid resource class in resources parameter: {name}")
        for name, amount in q.resources.items():
            inv = t.inventories.alias()
            usage = usage_subquery([rc_map[name]])
            fits = (sa.select(inv.c.resource_provider_id)
                    .select_from(inv.outerjoin(
                        usage, sa.and_(usage.c.resource_provider_id == inv.c.resource_provider_id,
                                       usage.c.resource_class_id == inv.c.resource_class_id)))
                    .where(inv.c.resource_class_id == rc_map[name],
                           capacity_clause(inv, usage, amount)))
            sel = sel.where(_rp.c.id.in_(fits))
    sel = sel.order_by(_rp.c.id)
    return [_to_provider(row) for row in conn.execute(sel)]
