"""The reshaper: move inventories and the allocations against them in one transaction.

A class of inventory moving from one provider to another (say, VCPU from a
compute node to its new NUMA children) cannot be done as separate writes:
the old inventory cannot be deleted while allocated, the new allocations
cannot be made before the new inventory exists. ``reshape`` therefore
works in three steps inside one transaction, as upstream does (and with the
same generation bumps, which clients can observe):

1. each provider with new inventories gets the union of its current and
   its new records (a bump);
2. the consumers' allocations are replaced with the claim rules of
   ``allocations.write`` (a bump of every provider they touch);
3. each provider gets exactly its new inventories (a bump); deleting a
   class that is still allocated is refused with ``InventoryInUse``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from allotment import errors
from allotment.ledger import allocations, inventories, providers
from allotment.ledger.retry import Race


@dataclass(frozen=True)
class NewInventory:
    """A provider's complete inventory after the reshape."""

    provider_uuid: str
    generation: int
    # class name -> the record's fields as given (defaults filled later).
    inventories: dict[str, dict]


def _bump(conn: sa.Connection, provider: providers.Provider) -> None:
    try:
        providers.bump_generation(conn, provider)
    except errors.ConcurrentUpdate:
        raise Race(f"provider {provider.uuid} changed") from None


def reshape(conn: sa.Connection, new_inventories: list[NewInventory],
            claims: list[allocations.Claim]) -> None:
    """One attempt at a reshape, inside the caller's write transaction."""
    targets: list[tuple[providers.Provider, NewInventory]] = []
    for new in new_inventories:
        provider = providers.get(conn, new.provider_uuid)
        if provider is None:
            raise errors.BadRequest(
                f"Resource provider {new.provider_uuid} in inventories not found: "
                f"No resource provider with uuid {new.provider_uuid} found",
                code=errors.RESOURCE_PROVIDER_NOT_FOUND)
        if provider.generation != new.generation:
            raise errors.ConcurrentUpdate(
                f"resource provider generation conflict for provider {provider.uuid}: "
                f"actual: {provider.generation}, given: {new.generation}")
        records = [inventories.from_request(name, data)
                   for name, data in new.inventories.items()]
        inventories.check_capacity(provider.uuid, records, reserved_may_equal_total=True)
        targets.append((provider, new))

    for provider, new in targets:
        if not new.inventories:
            continue  # Nothing to add: the union would be the inventory as it is.
        union = {inv.resource_class: inv.fields()
                 for inv in inventories.get_inventories(conn, provider.id)}
        union.update(new.inventories)
        inventories.replace_inventories(conn, provider, union)
        _bump(conn, provider)

    allocations.write(conn, claims)

    for provider, new in targets:
        current = providers.get(conn, provider.uuid)
        inventories.replace_inventories(conn, current, new.inventories)
        _bump(conn, current)
