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
from typing import Any

import sqlalchemy as sa

from allotment.ledger import allocations, inventories, providers
from allotment.ledger.errors import UnknownInventoryProvider


@dataclass(frozen=True)
class NewInventory:
    """A provider's complete inventory after the reshape."""

    provider_uuid: str
    generation: int
    # class name -> the record's fields as given (defaults filled later).
    inventories: dict[str, dict[str, Any]]


def reshape(conn: sa.Connection, new_inventories: list[NewInventory],
            claims: list[allocations.Claim]) -> None:
    """One attempt at a reshape, on ``conn`` (run with ``retry.run_write``)."""
    # As upstream: every provider is found and its generation checked before
    # any new record is judged (a stale generation is a 409 even when another
    # provider's records are refused).
    targets: list[tuple[providers.Provider, NewInventory]] = []
    for new in new_inventories:
        provider = providers.get(conn, new.provider_uuid)
        if provider is None:
            raise UnknownInventoryProvider(new.provider_uuid)
        providers.check_generation(provider, new.generation)
        targets.append((provider, new))
    for provider, new in targets:
        records = [inventories.from_request(name, data)
                   for name, data in new.inventories.items()]
        inventories.check_capacity(provider.uuid, records, reserved_may_equal_total=True)

    for provider, new in targets:
        if not new.inventories:
            continue  # Nothing to add: the union would be the inventory as it is.
        union = {inv.resource_class: inv.fields()
                 for inv in inventories.get_inventories(conn, provider.id)}
        union.update(new.inventories)
        inventories.replace_inventories(conn, provider, union)
        providers.bump_generation(conn, provider)

    allocations.write(conn, claims)

    for provider, new in targets:
        current = providers.require(conn, provider.uuid)
        inventories.replace_inventories(conn, current, new.inventories)
        providers.bump_generation(conn, current)
