"""What the ledger and the candidates engine refuse, as plain exceptions.

Each says what went wrong and carries the values involved; ``str(exc)`` is
the reason in upstream's words. None of them knows about HTTP: the status
and the Placement error code of each are one table in
``allotment.http.errors`` (``REFUSALS``), where handlers may also add the
context upstream words around a reason.

Two exceptions here are control flow inside the write retry loop, not
answers: ``Race`` (somebody else committed first: run the transaction
again) and ``RetriesExhausted`` (still losing after the configured retries).
"""

from __future__ import annotations

from collections.abc import Iterable


class LedgerError(Exception):
    """A refusal from the domain; ``str(exc)`` is the reason."""


# --- a thing addressed by the request does not exist -----------------------

class ProviderNotFound(LedgerError):
    def __init__(self, uuid: str) -> None:
        super().__init__(f"No resource provider with uuid {uuid} found")
        self.uuid = uuid


class ResourceClassNotFound(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"No such resource class {name}.")
        self.name = name


class TraitNotFound(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"No such trait(s): {name}.")
        self.name = name


class InventoryNotFound(LedgerError):
    """The provider has no inventory record of the class."""

    def __init__(self, provider_uuid: str, resource_class: str) -> None:
        super().__init__(f"No inventory of class {resource_class} found.")
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class


class NoAllocations(LedgerError):
    def __init__(self, consumer_uuid: str) -> None:
        super().__init__(f"No allocations for consumer '{consumer_uuid}'")
        self.consumer_uuid = consumer_uuid


# --- a name or uuid given in the request's data does not exist -------------

class UnknownResourceClass(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"No such resource class {name}.")
        self.name = name


class UnknownTraits(LedgerError):
    def __init__(self, names: Iterable[str]) -> None:
        self.names = sorted(names)
        super().__init__(f"No such trait(s): {', '.join(self.names)}.")


class UnknownProvider(LedgerError):
    """A provider an allocation names does not exist."""

    def __init__(self, uuid: str) -> None:
        super().__init__(f"Allocation for resource provider '{uuid}' that does not exist.")
        self.uuid = uuid


class UnknownInventoryProvider(LedgerError):
    """A provider a reshape gives inventories to does not exist."""

    def __init__(self, uuid: str) -> None:
        super().__init__(f"Resource provider {uuid} in inventories not found: "
                         f"No resource provider with uuid {uuid} found")
        self.uuid = uuid


# --- the data breaks a rule --------------------------------------------------

class InvalidCapacity(LedgerError):
    """An inventory record whose capacity is negative (or zero, before 1.26)."""

    def __init__(self, provider_uuid: str, resource_class: str, zero_allowed: bool) -> None:
        relation = "greater than" if zero_allowed else "greater than or equal to"
        super().__init__(f"Invalid inventory for '{resource_class}' on resource provider "
                         f"'{provider_uuid}'. The reserved value is {relation} total.")
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class


class CapacityOutOfRange(InvalidCapacity):
    """An inventory record whose capacity is larger than the service can count."""

    def __init__(self, provider_uuid: str, resource_class: str, product: float,
                 bound: int) -> None:
        LedgerError.__init__(
            self, f"Invalid inventory for '{resource_class}' on resource provider "
            f"'{provider_uuid}'. Its capacity, (total - reserved) x allocation_ratio = "
            f"{product:.6g}, is larger than {bound}, the most this service can count: "
            "lower allocation_ratio.")
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class


class InvalidNewProvider(LedgerError):
    """A new provider without a name, or whose parent is itself or does not exist."""

    def __init__(self, name: str, uuid: str, reason: str) -> None:
        super().__init__(f'Unable to create resource provider "{name}", {uuid}: Object '
                         f'action create failed because: {reason}')
        self.uuid = uuid
        self.reason = reason


class InvalidTreeChange(LedgerError):
    """A provider update that would break the tree rules."""

    def __init__(self, uuid: str, reason: str, action: str = "update") -> None:
        super().__init__(f"Unable to save resource provider {uuid}: Object action {action} "
                         f"failed because: {reason}")
        self.uuid = uuid
        self.reason = reason


class StandardResourceClass(LedgerError):
    """Standard classes can be neither renamed nor deleted."""

    def __init__(self, name: str, action: str) -> None:
        suffix = "." if action == "delete" else ""
        super().__init__(f"Cannot {action} standard resource class {name}{suffix}")
        self.name = name


class StandardTrait(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Cannot delete standard trait {name}.")
        self.name = name


class InvalidAllocation(LedgerError):
    """The amounts do not fit the providers' inventories."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Unable to allocate inventory: {detail}")


# --- the data conflicts with what is there ----------------------------------

class DuplicateProvider(LedgerError):
    def __init__(self, field: str, value: str) -> None:
        super().__init__(f"Conflicting resource provider {field}: {value} already exists.")
        self.field = field
        self.value = value


class ProviderHasChildren(LedgerError):
    def __init__(self, uuid: str) -> None:
        super().__init__(f"Unable to delete parent resource provider {uuid}: It has child "
                         "resource providers.")
        self.uuid = uuid


class ProviderInUse(LedgerError):
    def __init__(self, uuid: str) -> None:
        super().__init__(f"Unable to delete resource provider {uuid}: Resource provider has "
                         "allocations.")
        self.uuid = uuid


class InventoryInUse(LedgerError):
    def __init__(self, resource_classes: list[str], provider_uuid: str) -> None:
        super().__init__(f"Inventory for '{', '.join(resource_classes)}' on resource provider "
                         f"'{provider_uuid}' in use.")
        self.resource_classes = resource_classes
        self.provider_uuid = provider_uuid


class InventoryExists(LedgerError):
    def __init__(self, resource_class: str, provider_uuid: str) -> None:
        super().__init__(f"Update conflict: Inventory for '{resource_class}' on resource "
                         f"provider '{provider_uuid}' already exists.")
        self.resource_class = resource_class
        self.provider_uuid = provider_uuid


class ResourceClassExists(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Resource class {name} already exists.")
        self.name = name


class ResourceClassInUse(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"Cannot delete resource class {name}. Class is in use in inventory.")
        self.name = name


class ResourceClassIdsContended(LedgerError):
    """Every attempt to take the next custom class id lost to another writer."""

    def __init__(self, name: str) -> None:
        super().__init__("Max retries of DB transaction exceeded attempting to create "
                         f"resource class: {name}, please try again.")
        self.name = name


class TraitInUse(LedgerError):
    def __init__(self, name: str) -> None:
        super().__init__(f"The trait {name} is in use by a resource provider.")
        self.name = name


class ProviderGenerationConflict(LedgerError):
    """The generation the client sent is not the provider's."""

    def __init__(self, uuid: str, actual: int, given: int) -> None:
        super().__init__(f"resource provider generation conflict for provider {uuid}: "
                         f"actual: {actual}, given: {given}")
        self.uuid = uuid
        self.actual = actual
        self.given = given


class ConsumerGenerationConflict(LedgerError):
    """The consumer generation the client sent (1.28+) is not the consumer's."""

    def __init__(self, uuid: str, actual: int | None, given: int | None) -> None:
        expected = "null" if actual is None else actual
        super().__init__(f"consumer generation conflict - expected {expected} but got {given}")
        self.uuid = uuid
        self.actual = actual
        self.given = given


# --- a candidates search over its budget (``candidates.budget``) ----------------

class TooManyCandidates(LedgerError):
    """The answer would hold more allocation entries than one answer may."""

    def __init__(self, max_entries: int) -> None:
        super().__init__(
            f"This request matches more allocation candidates than one answer may hold "
            f"(more than {max_entries} allocation entries, [allotment] "
            f"candidates_max_entries). Pass limit=N, or narrow the request: "
            f"group_policy=isolate, fewer or larger granular groups, required traits, "
            f"member_of or in_tree.")
        self.max_entries = max_entries


class CandidatesTooSlow(LedgerError):
    """The search ran out of time."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"This request could not be answered within {seconds:g} seconds "
            f"([allotment] candidates_time_limit). Pass limit=N, or narrow the request: "
            f"group_policy=isolate, fewer granular groups, required traits, member_of "
            f"or in_tree.")
        self.seconds = seconds


class CandidatesBusy(LedgerError):
    """Every large-search slot of the worker is taken."""

    def __init__(self, slots: int) -> None:
        super().__init__(
            f"This server is already answering as many large allocation candidates "
            f"requests as it allows ({slots} per worker process, [allotment] "
            f"candidates_large_slots). Retry later, or pass a smaller limit.")
        self.slots = slots


class ClientGone(LedgerError):
    """The client closed its connection: nobody is waiting for the answer."""

    def __init__(self) -> None:
        super().__init__("The client closed the connection before the answer was ready.")


# --- headroom's what-if (``candidates.headroom``) ---------------------------------

class BadWhatIf(LedgerError):
    """``exclude_roots`` or ``add`` names what the cloud does not have (a provider,
    a root, a resource class), or a capacity too large to count."""


# --- the retry loop ------------------------------------------------------------

class Race(Exception):
    """A compare-and-set found that somebody else committed first.

    Not a refusal: the write retry loop (``ledger.retry``) rolls the
    transaction back and runs it again in a new one.
    """


class RetriesExhausted(LedgerError):
    """Still losing races after the configured number of retries."""

    def __init__(self) -> None:
        super().__init__("Another thread concurrently updated the resource provider data. "
                         "Please retry your update")
