"""What the ledger and the candidates engine refuse, as plain exceptions.

Each says what went wrong by its class and carries the facts involved (a
uuid, a name, a resource class, the numbers) as attributes, and nothing
more: no wording. How a refusal is worded for a client, and the HTTP
status and Placement error code it is answered with, are one table in
``allotment.refusals``, which the domain never imports. ``str(exc)`` is
for logs only: the class and its facts (``ProviderNotFound(uuid='…')``).

Two exceptions here are control flow inside the write retry loop, not
answers: ``Race`` (somebody else committed first: run the transaction
again) and ``RetriesExhausted`` (still losing after the configured retries).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal


class LedgerError(Exception):
    """A refusal from the domain; its attributes are the facts of the case."""

    def __str__(self) -> str:
        facts = ", ".join(f"{name}={value!r}" for name, value in vars(self).items()
                          if not name.startswith("_"))
        return f"{type(self).__name__}({facts})"


# --- a thing addressed by the request does not exist -----------------------

class ProviderNotFound(LedgerError):
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class ResourceClassNotFound(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class TraitNotFound(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class InventoryNotFound(LedgerError):
    """The provider has no inventory record of the class."""

    def __init__(self, provider_uuid: str, resource_class: str) -> None:
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class


class NoAllocations(LedgerError):
    def __init__(self, consumer_uuid: str) -> None:
        self.consumer_uuid = consumer_uuid


# --- a name or uuid given in the request's data does not exist -------------

class UnknownResourceClass(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class UnknownTraits(LedgerError):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(names)


class UnknownProvider(LedgerError):
    """A provider an allocation names does not exist."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class UnknownInventoryProvider(LedgerError):
    """A provider a reshape gives inventories to does not exist."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


# --- the data breaks a rule --------------------------------------------------

class InvalidCapacity(LedgerError):
    """An inventory record whose capacity is negative (or zero, before 1.26:
    ``zero_allowed`` False)."""

    def __init__(self, provider_uuid: str, resource_class: str, zero_allowed: bool) -> None:
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class
        self.zero_allowed = zero_allowed


class CapacityOutOfRange(InvalidCapacity):
    """An inventory record whose capacity, ``product``, is larger than the
    service can count (``bound``)."""

    def __init__(self, provider_uuid: str, resource_class: str, product: float,
                 bound: int) -> None:
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class
        self.product = product
        self.bound = bound


# Why a new provider is refused: no name, its own parent, a parent that does not exist.
NewProviderProblem = Literal["no_name", "own_parent", "no_parent"]


class InvalidNewProvider(LedgerError):
    """A new provider without a name, or whose parent is itself or does not exist."""

    def __init__(self, name: str, uuid: str, problem: NewProviderProblem) -> None:
        self.name = name
        self.uuid = uuid
        self.problem = problem


# Why a provider's move is refused: the new parent does not exist, a move
# (re-parenting, un-parenting) not allowed at this microversion, a loop.
TreeProblem = Literal["no_parent", "reparent", "unparent", "loop"]


class InvalidTreeChange(LedgerError):
    """A provider update that would break the tree rules."""

    def __init__(self, uuid: str, problem: TreeProblem) -> None:
        self.uuid = uuid
        self.problem = problem


class StandardResourceClass(LedgerError):
    """Standard classes can be neither renamed (``action`` "update") nor deleted."""

    def __init__(self, name: str, action: Literal["update", "delete"]) -> None:
        self.name = name
        self.action = action


class StandardTrait(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class InvalidAllocation(LedgerError):
    """The amounts do not fit the providers' inventories (one of the kinds below)."""


class AllocationWithoutInventory(InvalidAllocation):
    """Providers with no inventory of the classes asked of them."""

    def __init__(self, resource_classes: list[str], provider_uuids: list[str]) -> None:
        self.resource_classes = resource_classes
        self.provider_uuids = provider_uuids


class AllocationBreaksConstraints(InvalidAllocation):
    """An amount outside the inventory's min_unit, max_unit or step_size."""

    def __init__(self, resource_class: str, provider_uuid: str) -> None:
        self.resource_class = resource_class
        self.provider_uuid = provider_uuid


class AllocationOverCapacity(InvalidAllocation):
    """An amount that would take the provider over its capacity."""

    def __init__(self, resource_class: str, provider_uuid: str) -> None:
        self.resource_class = resource_class
        self.provider_uuid = provider_uuid


# --- the data conflicts with what is there ----------------------------------

class DuplicateProvider(LedgerError):
    def __init__(self, field: Literal["uuid", "name"], value: str) -> None:
        self.field = field
        self.value = value


class ProviderHasChildren(LedgerError):
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class ProviderInUse(LedgerError):
    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class InventoryInUse(LedgerError):
    def __init__(self, resource_classes: list[str], provider_uuid: str) -> None:
        self.resource_classes = resource_classes
        self.provider_uuid = provider_uuid


class InventoryExists(LedgerError):
    def __init__(self, resource_class: str, provider_uuid: str) -> None:
        self.resource_class = resource_class
        self.provider_uuid = provider_uuid


class ResourceClassExists(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class ResourceClassInUse(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class ResourceClassIdsContended(LedgerError):
    """Every attempt to take the next custom class id lost to another writer."""

    def __init__(self, name: str) -> None:
        self.name = name


class TraitInUse(LedgerError):
    def __init__(self, name: str) -> None:
        self.name = name


class ProviderGenerationConflict(LedgerError):
    """The generation the client sent is not the provider's."""

    def __init__(self, uuid: str, actual: int, given: int) -> None:
        self.uuid = uuid
        self.actual = actual
        self.given = given


class ConsumerGenerationConflict(LedgerError):
    """The consumer generation the client sent (1.28+) is not the consumer's
    (``actual`` None: the consumer does not exist)."""

    def __init__(self, uuid: str, actual: int | None, given: int | None) -> None:
        self.uuid = uuid
        self.actual = actual
        self.given = given


# --- a candidates search over its budget (``candidates.budget``) ----------------

class TooManyCandidates(LedgerError):
    """The answer would hold more allocation entries than one answer may."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries


class CandidatesTooSlow(LedgerError):
    """The search ran out of time."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class CandidatesBusy(LedgerError):
    """Every large-search slot of the worker is taken."""

    def __init__(self, slots: int) -> None:
        self.slots = slots


class ClientGone(LedgerError):
    """The client closed its connection: nobody is waiting for the answer."""


# --- headroom's what-if (``candidates.headroom``) ---------------------------------

class BadWhatIf(LedgerError):
    """``exclude_roots`` or ``add`` names what the cloud does not have (a provider,
    a root, a resource class), or a capacity too large to count: one of the kinds
    below."""


class ExcludedRootNotFound(BadWhatIf):
    """``exclude_roots`` names a provider that does not exist."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid


class ExcludedNotRoot(BadWhatIf):
    """``exclude_roots`` names a provider that is not a root (``root_uuid`` is its root)."""

    def __init__(self, uuid: str, root_uuid: str) -> None:
        self.uuid = uuid
        self.root_uuid = root_uuid


class AddedClassNotFound(BadWhatIf):
    """``add`` names a resource class that does not exist."""

    def __init__(self, name: str) -> None:
        self.name = name


class AddedCapacityOutOfRange(BadWhatIf):
    """``add``'s ``total`` x ``ratio`` of a class is more than ``bound``."""

    def __init__(self, name: str, total: int, ratio: float, bound: int) -> None:
        self.name = name
        self.total = total
        self.ratio = ratio
        self.bound = bound


# --- the retry loop ------------------------------------------------------------

class Race(Exception):
    """A compare-and-set found that somebody else committed first.

    Not a refusal: the write retry loop (``ledger.retry``) rolls the
    transaction back and runs it again in a new one.
    """


class RetriesExhausted(LedgerError):
    """Still losing races after the configured number of retries."""
