"""Every domain refusal's answer in one place: its status, its code, its words.

The domain (``allotment.ledger.errors``) raises exceptions that carry the
facts of a refusal (a uuid, a name, the numbers) and no wording. This
module words them: ``REFUSALS`` gives, per exception class, the HTTP status,
the Placement error code and the default message (upstream's), and the
named tables below it (``INVENTORY_UPDATE`` …) the variants with which
upstream words the same refusal on one endpoint, or, rarely, answers it
with another status or code. Handlers name the table of their endpoint
(``with explain(refusals.INVENTORY_UPDATE, uuid=uuid)``) and hold no words
of a domain refusal themselves; ``allotment.http.errors`` renders.

It is a module of its own, not part of ``allotment.http``, so that callers
outside the HTTP layer that show a refusal (the headroom metric's log) say
it in the same words; the domain below never imports it
(``tests/test_imports.py``). Messages are upstream's byte for byte: the
conformance suite and our tests compare them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from allotment import errors
from allotment.ledger import errors as ledger

# The facts of the request an endpoint's wording may name besides the
# exception's (the URL's uuid as the client wrote it, a consumer's uuid).
Request = Mapping[str, str]

Words = Callable[[Any], str]
EndpointWords = Callable[[Any, Request], str]


@dataclass(frozen=True)
class Refusal:
    """How a domain refusal is answered unless its endpoint says otherwise."""

    status: int
    code: str
    words: Words
    # Seconds for Retry-After, for refusals that pass when retried.
    retry_after: int | None = None


@dataclass(frozen=True)
class Variant:
    """An endpoint's own answer to a refusal: its words, and where upstream
    answers it so, another status and code."""

    words: EndpointWords
    status: int | None = None
    code: str | None = None


# What a named table holds: words alone, or a ``Variant``.
Endpoint = Mapping[type[ledger.LedgerError], EndpointWords | Variant]


_NEW_PROVIDER_PROBLEMS = {
    "no_name": "name is required",
    "own_parent": "parent provider UUID cannot be same as UUID. Please set parent provider "
                  "UUID to None if there is no parent.",
    "no_parent": "parent provider UUID does not exist.",
}

_TREE_PROBLEMS = {
    "no_parent": "parent provider UUID does not exist.",
    "reparent": "re-parenting a provider is not currently allowed.",
    "unparent": "un-parenting a provider is not currently allowed.",
    "loop": "creating loop in the provider tree is not allowed.",
}


def _invalid_capacity(e: ledger.InvalidCapacity) -> str:
    relation = "greater than" if e.zero_allowed else "greater than or equal to"
    return (f"Invalid inventory for '{e.resource_class}' on resource provider "
            f"'{e.provider_uuid}'. The reserved value is {relation} total.")


def _tree_change(e: ledger.InvalidTreeChange) -> str:
    # Upstream names a missing new parent a failed "create" even on an update.
    action = "create" if e.problem == "no_parent" else "update"
    return (f"Unable to save resource provider {e.uuid}: Object action {action} failed "
            f"because: {_TREE_PROBLEMS[e.problem]}")


def _allocation(detail: str) -> str:
    return f"Unable to allocate inventory: {detail}"


_D = errors.DEFAULT

# Domain exception -> its status, code and default words. A class not listed
# is answered as its nearest listed base class.
REFUSALS: dict[type[ledger.LedgerError], Refusal] = {
    # Something the request addresses does not exist.
    ledger.ProviderNotFound: Refusal(
        404, _D, lambda e: f"No resource provider with uuid {e.uuid} found"),
    ledger.ResourceClassNotFound: Refusal(
        404, _D, lambda e: f"No such resource class {e.name}."),
    ledger.TraitNotFound: Refusal(
        404, _D, lambda e: f"No such trait(s): {e.name}."),
    ledger.InventoryNotFound: Refusal(
        404, _D, lambda e: f"No inventory of class {e.resource_class} found."),
    ledger.NoAllocations: Refusal(
        404, _D, lambda e: f"No allocations for consumer '{e.consumer_uuid}'"),
    # Something the request's data names does not exist.
    ledger.UnknownResourceClass: Refusal(
        400, _D, lambda e: f"No such resource class {e.name}."),
    ledger.UnknownTraits: Refusal(
        400, _D, lambda e: f"No such trait(s): {', '.join(e.names)}."),
    ledger.UnknownProvider: Refusal(
        400, _D, lambda e: f"Allocation for resource provider '{e.uuid}' that does not exist."),
    ledger.UnknownInventoryProvider: Refusal(
        400, errors.RESOURCE_PROVIDER_NOT_FOUND,
        lambda e: f"Resource provider {e.uuid} in inventories not found: "
                  f"No resource provider with uuid {e.uuid} found"),
    # The data breaks a rule.
    ledger.InvalidCapacity: Refusal(400, _D, _invalid_capacity),
    ledger.CapacityOutOfRange: Refusal(
        400, _D,
        lambda e: f"Invalid inventory for '{e.resource_class}' on resource provider "
                  f"'{e.provider_uuid}'. Its capacity, (total - reserved) x allocation_ratio = "
                  f"{e.product:.6g}, is larger than {e.bound}, the most this service can "
                  "count: lower allocation_ratio."),
    ledger.InvalidNewProvider: Refusal(
        400, _D,
        lambda e: f'Unable to create resource provider "{e.name}", {e.uuid}: Object action '
                  f'create failed because: {_NEW_PROVIDER_PROBLEMS[e.problem]}'),
    ledger.InvalidTreeChange: Refusal(400, _D, _tree_change),
    ledger.StandardResourceClass: Refusal(
        400, _D,
        lambda e: f"Cannot {e.action} standard resource class {e.name}"
                  f"{'.' if e.action == 'delete' else ''}"),
    ledger.StandardTrait: Refusal(
        400, _D, lambda e: f"Cannot delete standard trait {e.name}."),
    ledger.AllocationWithoutInventory: Refusal(
        409, _D,
        lambda e: _allocation(f"Inventory for '{', '.join(e.resource_classes)}' on resource "
                              f"provider '{', '.join(e.provider_uuids)}' invalid.")),
    ledger.AllocationBreaksConstraints: Refusal(
        409, _D,
        lambda e: _allocation(f"Unable to create allocation for '{e.resource_class}' on "
                              f"resource provider '{e.provider_uuid}'. The requested amount "
                              "would violate inventory constraints.")),
    ledger.AllocationOverCapacity: Refusal(
        409, _D,
        lambda e: _allocation(f"Unable to create allocation for '{e.resource_class}' on "
                              f"resource provider '{e.provider_uuid}'. The requested amount "
                              "would exceed the capacity.")),
    # The data conflicts with what is there.
    ledger.DuplicateProvider: Refusal(
        409, errors.DUPLICATE_NAME,
        lambda e: f"Conflicting resource provider {e.field}: {e.value} already exists."),
    ledger.ProviderHasChildren: Refusal(
        409, errors.PROVIDER_CANNOT_DELETE_PARENT,
        lambda e: f"Unable to delete parent resource provider {e.uuid}: It has child "
                  "resource providers."),
    ledger.ProviderInUse: Refusal(
        409, errors.PROVIDER_IN_USE,
        lambda e: f"Unable to delete resource provider {e.uuid}: Resource provider has "
                  "allocations."),
    ledger.InventoryInUse: Refusal(
        409, errors.INVENTORY_INUSE,
        lambda e: f"Inventory for '{', '.join(e.resource_classes)}' on resource provider "
                  f"'{e.provider_uuid}' in use."),
    ledger.InventoryExists: Refusal(
        409, errors.CONCURRENT_UPDATE,
        lambda e: f"Update conflict: Inventory for '{e.resource_class}' on resource "
                  f"provider '{e.provider_uuid}' already exists."),
    ledger.ResourceClassExists: Refusal(
        409, _D, lambda e: f"Resource class {e.name} already exists."),
    ledger.ResourceClassInUse: Refusal(
        409, _D,
        lambda e: f"Cannot delete resource class {e.name}. Class is in use in inventory."),
    ledger.ResourceClassIdsContended: Refusal(
        409, _D,
        lambda e: "Max retries of DB transaction exceeded attempting to create "
                  f"resource class: {e.name}, please try again."),
    ledger.TraitInUse: Refusal(
        409, _D, lambda e: f"The trait {e.name} is in use by a resource provider."),
    ledger.ProviderGenerationConflict: Refusal(
        409, errors.CONCURRENT_UPDATE,
        lambda e: f"resource provider generation conflict for provider {e.uuid}: "
                  f"actual: {e.actual}, given: {e.given}"),
    ledger.ConsumerGenerationConflict: Refusal(
        409, errors.CONCURRENT_UPDATE,
        lambda e: "consumer generation conflict - expected "
                  f"{'null' if e.actual is None else e.actual} but got {e.given}"),
    ledger.RetriesExhausted: Refusal(
        409, errors.CONCURRENT_UPDATE,
        lambda e: "Another thread concurrently updated the resource provider data. "
                  "Please retry your update"),
    # A candidates search over its budget (``candidates.budget``).
    ledger.TooManyCandidates: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE,
        lambda e: "This request matches more allocation candidates than one answer may hold "
                  f"(more than {e.max_entries} allocation entries, [allotment] "
                  "candidates_max_entries). Pass limit=N, or narrow the request: "
                  "group_policy=isolate, fewer or larger granular groups, required traits, "
                  "member_of or in_tree."),
    ledger.CandidatesTooSlow: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE,
        lambda e: f"This request could not be answered within {e.seconds:g} seconds "
                  "([allotment] candidates_time_limit). Pass limit=N, or narrow the request: "
                  "group_policy=isolate, fewer granular groups, required traits, member_of "
                  "or in_tree."),
    ledger.CandidatesBusy: Refusal(
        503, _D,
        lambda e: "This server is already answering as many large allocation candidates "
                  f"requests as it allows ({e.slots} per worker process, [allotment] "
                  "candidates_large_slots). Retry later, or pass a smaller limit.",
        retry_after=1),
    ledger.ClientGone: Refusal(
        400, _D, lambda e: "The client closed the connection before the answer was ready."),
    # Headroom's what-if names what the cloud does not have.
    ledger.ExcludedRootNotFound: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE,
        lambda e: f"exclude_roots: no resource provider with uuid {e.uuid}."),
    ledger.ExcludedNotRoot: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE,
        lambda e: f"exclude_roots: {e.uuid} is not a root provider (its root is "
                  f"{e.root_uuid})."),
    ledger.AddedClassNotFound: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE, lambda e: f"add: no such resource class {e.name}."),
    ledger.AddedCapacityOutOfRange: Refusal(
        400, errors.QUERYPARAM_BAD_VALUE,
        lambda e: f"add: the capacity of {e.name}, {e.total} x {e.ratio:g}, is larger "
                  f"than {e.bound}, the most this service can count."),
}


def answer(exc: ledger.LedgerError) -> Refusal:
    """The refusal's entry in ``REFUSALS`` (its class's, or its nearest base's)."""
    return next(REFUSALS[kind] for kind in type(exc).__mro__ if kind in REFUSALS)


def message(exc: ledger.LedgerError) -> str:
    """The refusal in upstream's default words."""
    return answer(exc).words(exc)


# --- the endpoints' own words -----------------------------------------------------
#
# Each table names the request facts its words use; the handler passes them
# to ``explain``. A refusal a table does not list is answered by ``REFUSALS``.

def _default(e: ledger.LedgerError, _: Request) -> str:
    """The default words, but caught by the endpoint as upstream's handler does
    (its answer then carries Vary like any other)."""
    return message(e)


# Upstream's words for a stale provider generation on traits and aggregates.
GENERATION_CHANGED = ("Resource provider's generation already changed. Please update the "
                      "generation and try again.")

# How a lost race reads on the allocation writes once the retries are used up.
_RACE_PREFIX = "Inventory and/or allocations changed while attempting to allocate: "

# PUT /resource_providers/{uuid}/aggregates
AGGREGATES_UPDATE: Endpoint = {
    ledger.ProviderGenerationConflict: lambda e, r: GENERATION_CHANGED,
}

# GET /allocation_candidates, GET /resource_providers (resources=)
_RESOURCES_PARAM: Endpoint = {
    ledger.UnknownResourceClass:
        lambda e, r: f"Invalid resource class in resources parameter: {message(e)}",
}
ALLOCATION_CANDIDATES = _RESOURCES_PARAM
# GET /explain/allocation_candidates (allotment's own)
ALLOCATION_CANDIDATES_EXPLAIN = _RESOURCES_PARAM

# POST /allocations (request: nothing)
ALLOCATIONS_POST: Endpoint = {
    ledger.UnknownResourceClass: lambda e, r: f"Unable to allocate inventory {message(e)}",
    ledger.RetriesExhausted: lambda e, r: _RACE_PREFIX + message(e),
}

# PUT /allocations/{consumer_uuid} (request: consumer_uuid, normalized)
ALLOCATIONS_PUT: Endpoint = {
    ledger.UnknownResourceClass:
        lambda e, r: f"Unable to allocate inventory for consumer {r['consumer_uuid']}: "
                     f"{message(e)}",
    ledger.RetriesExhausted: lambda e, r: _RACE_PREFIX + message(e),
}

# GET /audit (allotment's own)
AUDIT: Endpoint = {
    ledger.CandidatesBusy:
        lambda e, r: "This server is already running as many large searches and audits as "
                     f"it allows ({e.slots} per worker process, [allotment] "
                     "candidates_large_slots). Retry later.",
    ledger.CandidatesTooSlow:
        lambda e, r: f"This audit could not be finished within {e.seconds:g} seconds "
                     "([allotment] candidates_time_limit). Ask for fewer kinds or a "
                     "smaller limit.",
}

# GET /headroom (allotment's own)
HEADROOM: Endpoint = {
    **_RESOURCES_PARAM,
    ledger.CandidatesTooSlow:
        lambda e, r: "This headroom count could not be finished within "
                     f"{e.seconds:g} seconds ([allotment] candidates_time_limit). Narrow "
                     "the request (required traits, member_of, in_tree) or ask about part "
                     "of the cloud.",
}

# GET /resource_providers/{uuid}/inventories and .../inventories/{resource_class}
# (request: uuid as in the URL)
INVENTORY_READ: Endpoint = {
    ledger.ProviderNotFound:
        lambda e, r: f"No resource provider with uuid {r['uuid']} found : {message(e)}",
}

# POST /resource_providers/{uuid}/inventories (request: uuid)
INVENTORY_CREATE: Endpoint = {
    ledger.InvalidCapacity:
        lambda e, r: f"Unable to create inventory for resource provider {r['uuid']}: "
                     f"{message(e)}",
    ledger.UnknownResourceClass:
        lambda e, r: f"Unable to create inventory for resource provider {r['uuid']}: "
                     f"{message(e)}",
}

# PUT /resource_providers/{uuid}/inventories (request: uuid)
INVENTORIES_REPLACE: Endpoint = {
    ledger.ProviderGenerationConflict: lambda e, r: "resource provider generation conflict",
    ledger.InvalidCapacity:
        lambda e, r: f"Unable to update inventory for resource provider {r['uuid']}: "
                     f"{message(e)}",
    ledger.UnknownResourceClass:
        lambda e, r: f"Unknown resource class in inventory for resource provider "
                     f"{r['uuid']}: {message(e)}",
    ledger.InventoryInUse: lambda e, r: f"update conflict: {message(e)}",
}

# PUT /resource_providers/{uuid}/inventories/{resource_class} (request: uuid)
INVENTORY_UPDATE: Endpoint = {
    ledger.ProviderGenerationConflict: lambda e, r: "resource provider generation conflict",
    ledger.InvalidCapacity:
        lambda e, r: f"Unable to update inventory for resource provider {r['uuid']}: "
                     f"{message(e)}",
    # Upstream's status here: 400, not 404.
    ledger.InventoryNotFound: Variant(
        lambda e, r: "No inventory record with resource class for resource provider "
                     f"{r['uuid']}: {message(e)}",
        status=400, code=errors.DEFAULT),
}


def _no_inventory_to_delete(r: Request) -> str:
    return f"No inventory of class {r['resource_class']} found for delete"


# DELETE /resource_providers/{uuid}/inventories/{resource_class}
# (request: resource_class as in the URL)
INVENTORY_DELETE: Endpoint = {
    ledger.ResourceClassNotFound:
        lambda e, r: f"{_no_inventory_to_delete(r)}: {message(e)}",
    ledger.InventoryNotFound:
        lambda e, r: f"{_no_inventory_to_delete(r)}: {_no_inventory_to_delete(r)}",
    # As upstream: a concurrent update, not the inventory code.
    ledger.InventoryInUse: Variant(
        lambda e, r: f"Unable to delete inventory of class {r['resource_class']}: "
                     f"{message(e)}",
        status=409, code=errors.CONCURRENT_UPDATE),
}

# GET /resource_providers/{uuid}/allocations (request: uuid)
PROVIDER_ALLOCATIONS: Endpoint = {
    ledger.ProviderNotFound:
        lambda e, r: f"Resource provider '{r['uuid']}' not found: {message(e)}",
}

# GET /resource_providers
PROVIDERS_LIST: Endpoint = {
    **_RESOURCES_PARAM,
    ledger.UnknownTraits:
        lambda e, r: f'Invalid trait(s) in "required" parameter: {message(e)}',
}

# PUT /resource_providers/{uuid}
PROVIDER_UPDATE: Endpoint = {
    ledger.DuplicateProvider:
        lambda e, r: f"Conflicting resource provider {e.value} already exists.",
}

# DELETE /resource_providers/{uuid}
PROVIDER_DELETE: Endpoint = {
    ledger.ProviderNotFound: lambda e, r: f"{message(e)} for delete",
}

# POST /reshaper
RESHAPE: Endpoint = {
    ledger.UnknownResourceClass: lambda e, r: f"malformed reshaper data: {message(e)}",
    ledger.InventoryInUse: lambda e, r: f"update conflict: {message(e)}",
    ledger.RetriesExhausted: lambda e, r: f"update conflict: {message(e)}",
}

# POST /resource_classes
RESOURCE_CLASS_CREATE: Endpoint = {
    ledger.ResourceClassExists:
        lambda e, r: f"Conflicting resource class already exists: {e.name}",
}

# PUT /resource_classes/{name} before 1.7 (a rename)
RESOURCE_CLASS_RENAME: Endpoint = {
    ledger.ResourceClassExists: lambda e, r: f"Resource class already exists: {e.name}",
}

# DELETE /resource_classes/{name}
RESOURCE_CLASS_DELETE: Endpoint = {
    ledger.StandardResourceClass:
        lambda e, r: f"Error in delete resource class: {message(e)}",
    ledger.ResourceClassInUse: lambda e, r: f"Error in delete resource class: {message(e)}",
}

# GET and DELETE /traits/{name}
TRAIT: Endpoint = {
    ledger.TraitNotFound: _default,
}

# GET /resource_providers/{uuid}/traits (request: uuid)
PROVIDER_TRAITS_READ: Endpoint = {
    ledger.ProviderNotFound:
        lambda e, r: f"No resource provider with uuid {r['uuid']} found: {message(e)}",
}

# PUT /resource_providers/{uuid}/traits
PROVIDER_TRAITS_UPDATE: Endpoint = {
    ledger.ProviderGenerationConflict: lambda e, r: GENERATION_CHANGED,
    ledger.UnknownTraits: lambda e, r: f"No such trait {', '.join(e.names)}",
}

# GET /resource_providers/{uuid}/usages
PROVIDER_USAGES: Endpoint = {
    ledger.ProviderNotFound: lambda e, r: f"{message(e)}: {message(e)}",
}
