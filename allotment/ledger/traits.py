"""Traits: the catalogue (standard from os-traits, custom CUSTOM_*) and provider sets."""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from allotment.db import tables as t
from allotment.ledger import providers
from allotment.ledger.common import is_duplicate, utcnow
from allotment.ledger.errors import (
    ProviderNotFound,
    StandardTrait,
    TraitInUse,
    TraitNotFound,
    UnknownTraits,
)
from allotment.ledger.providers import Provider

CUSTOM_PREFIX = "CUSTOM_"

_trait = t.traits
_rpt = t.resource_provider_traits


class Trait(NamedTuple):
    """A trait as the API shows it (a named tuple: a provider's traits are
    read for every host every five minutes, and a frozen dataclass costs
    three times as much to build)."""

    id: int
    name: str
    created_at: datetime.datetime | None
    updated_at: datetime.datetime | None

    @property
    def modified(self) -> datetime.datetime | None:
        return self.updated_at or self.created_at


def _select() -> sa.Select:
    return sa.select(_trait.c.id, _trait.c.name, _trait.c.created_at, _trait.c.updated_at)


def _to_trait(row: sa.Row[Any]) -> Trait:
    """A row of ``_select()``, whose columns are a Trait's fields in order."""
    return Trait._make(row)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def list_traits(conn: sa.Connection, names: list[str] | None = None,
                prefix: str | None = None, associated: bool | None = None) -> list[Trait]:
    """Traits by name, optionally only these names, this prefix, (not) on a provider."""
    sel = _select()
    if names is not None:
        sel = sel.where(_trait.c.name.in_(names))
    if prefix is not None:
        sel = sel.where(_trait.c.name.like(_like_prefix(prefix), escape="\\"))
    if associated is True:
        sel = sel.where(sa.exists().where(_rpt.c.trait_id == _trait.c.id))
    elif associated is False:
        sel = sel.where(~sa.exists().where(_rpt.c.trait_id == _trait.c.id))
    return [_to_trait(row) for row in conn.execute(sel.order_by(_trait.c.name))]


def get(conn: sa.Connection, name: str) -> Trait | None:
    row = conn.execute(_select().where(_trait.c.name == name)).first()
    return _to_trait(row) if row else None


def require(conn: sa.Connection, name: str) -> Trait:
    found = get(conn, name)
    if found is None:
        raise TraitNotFound(name)
    return found


def ensure(conn: sa.Connection, name: str) -> tuple[Trait, bool]:
    """The trait, created when missing; True when this call created it."""
    found = get(conn, name)
    if found is not None:
        return found, False
    try:
        # A savepoint keeps the transaction usable when a concurrent
        # request creates the same trait first.
        with conn.begin_nested():
            conn.execute(_trait.insert().values(name=name, created_at=utcnow()))
    except IntegrityError as exc:
        if not is_duplicate(exc):
            raise
        return require(conn, name), False
    return require(conn, name), True


def delete(conn: sa.Connection, name: str) -> None:
    """Delete a custom trait that no provider has."""
    trait = require(conn, name)
    if not name.startswith(CUSTOM_PREFIX):
        raise StandardTrait(name)
    in_use = conn.execute(sa.select(_rpt.c.trait_id)
                          .where(_rpt.c.trait_id == trait.id).limit(1)).first()
    if in_use:
        raise TraitInUse(name)
    result = conn.execute(_trait.delete().where(_trait.c.id == trait.id))
    if result.rowcount != 1:
        raise TraitNotFound(name)


def _traits_of_uuid_select() -> sa.Select:
    """The provider by its uuid with its traits by name, in one statement: the
    provider's one row by its unique uuid, its links by their provider index
    (a LEFT JOIN, so that a provider without traits still answers), each
    trait by its id."""
    rp = providers.PROVIDER_BY_UUID
    link = _rpt.alias("link")

    def of_trait(column: str) -> sa.Label[Any]:
        return (sa.select(_trait.c[column]).where(_trait.c.id == link.c.trait_id)
                .scalar_subquery().label(column))
    return (sa.select(rp.c.generation, link.c.trait_id.label("id"), of_trait("name"),
                      of_trait("created_at"), of_trait("updated_at"))
            .select_from(rp.outerjoin(link, link.c.resource_provider_id == rp.c.id))
            .where(*providers.by_uuid_conditions(rp))
            .order_by(sa.text("name")))


# Built once: nova-compute reads it for every host (issue 40).
_TRAITS_OF_UUID = _traits_of_uuid_select()


def traits_of_provider(conn: sa.Connection, uuid: str) -> tuple[int, list[Trait]]:
    """The generation and traits (by name) of the provider ``uuid``, read
    together; ``ProviderNotFound`` when there is no such provider."""
    rows = conn.execute(_TRAITS_OF_UUID, {"uuid": uuid}).all()
    if not rows:
        raise ProviderNotFound(uuid)
    # By position, in the select list's order: a Row's columns read by name
    # cost twenty times more.
    return rows[0][0], [Trait(trait_id, name, created_at, updated_at)
                        for _, trait_id, name, created_at, updated_at in rows
                        if name is not None]


def replace_for_provider(conn: sa.Connection, provider_uuid: str, generation: int,
                         names: list[str]) -> tuple[int, list[Trait]]:
    """Make the traits ``names`` the provider's; its generation and traits after it.

    The generation is bumped only when something changed, as upstream does.
    """
    provider = providers.require(conn, provider_uuid)
    providers.check_generation(provider, generation)
    wanted = set(names)
    found = list_traits(conn, names=sorted(wanted)) if wanted else []
    missing = wanted - {trait.name for trait in found}
    if missing:
        raise UnknownTraits(missing)
    if set_provider_traits(conn, provider, found):
        return providers.bump_generation(conn, provider), found
    return provider.generation, found


def clear_for_provider(conn: sa.Connection, provider_uuid: str) -> None:
    """Remove every trait from the provider (a bump when it had any)."""
    provider = providers.require(conn, provider_uuid)
    if set_provider_traits(conn, provider, []):
        providers.bump_generation(conn, provider)


def set_provider_traits(conn: sa.Connection, provider: Provider,
                        wanted: list[Trait]) -> bool:
    """Make ``wanted`` the provider's traits; True when anything changed.

    The caller bumps the generation when something changed. A trait added
    meanwhile by a concurrent writer is a duplicate key: a lost race, run
    again by the retry loop.
    """
    existing = {row.trait_id for row in conn.execute(
        sa.select(_rpt.c.trait_id).where(_rpt.c.resource_provider_id == provider.id))}
    wanted_ids = {trait.id for trait in wanted}
    to_delete = existing - wanted_ids
    to_add = wanted_ids - existing
    if to_delete:
        conn.execute(_rpt.delete().where(_rpt.c.resource_provider_id == provider.id,
                                         _rpt.c.trait_id.in_(sorted(to_delete))))
    if to_add:
        now = utcnow()
        conn.execute(_rpt.insert(), [
            {"resource_provider_id": provider.id, "trait_id": trait_id, "created_at": now}
            for trait_id in sorted(to_add)])
    return bool(to_delete or to_add)
