"""The domain's refusals answered: every exception worded in ``allotment.refusals``.

The exceptions carry facts only; the words are upstream's, byte for byte
(the conformance suite compares them), so the default words of every class
are pinned here, and the endpoint tables are checked to name only what
``REFUSALS`` answers.
"""

from __future__ import annotations

import pytest

from allotment import errors, refusals
from allotment.http.errors import explain, refusal
from allotment.ledger import errors as ledger

U = "rp-1"
R = "rp-2"

# (exception, its default words): every concrete refusal, every case of each.
DEFAULT_WORDS: list[tuple[ledger.LedgerError, str]] = [
    (ledger.ProviderNotFound(U), "No resource provider with uuid rp-1 found"),
    (ledger.ResourceClassNotFound("CUSTOM_X"), "No such resource class CUSTOM_X."),
    (ledger.TraitNotFound("CUSTOM_T"), "No such trait(s): CUSTOM_T."),
    (ledger.InventoryNotFound(U, "VCPU"), "No inventory of class VCPU found."),
    (ledger.NoAllocations("c-1"), "No allocations for consumer 'c-1'"),
    (ledger.UnknownResourceClass("CUSTOM_Y"), "No such resource class CUSTOM_Y."),
    (ledger.UnknownTraits(["CUSTOM_B", "CUSTOM_A"]), "No such trait(s): CUSTOM_A, CUSTOM_B."),
    (ledger.UnknownProvider(U),
     "Allocation for resource provider 'rp-1' that does not exist."),
    (ledger.UnknownInventoryProvider(U),
     "Resource provider rp-1 in inventories not found: No resource provider with uuid rp-1 "
     "found"),
    (ledger.InvalidCapacity(U, "VCPU", True),
     "Invalid inventory for 'VCPU' on resource provider 'rp-1'. The reserved value is "
     "greater than total."),
    (ledger.InvalidCapacity(U, "VCPU", False),
     "Invalid inventory for 'VCPU' on resource provider 'rp-1'. The reserved value is "
     "greater than or equal to total."),
    (ledger.CapacityOutOfRange(U, "VCPU", 1.234567e20, 2**63 - 1),
     "Invalid inventory for 'VCPU' on resource provider 'rp-1'. Its capacity, (total - "
     "reserved) x allocation_ratio = 1.23457e+20, is larger than 9223372036854775807, the "
     "most this service can count: lower allocation_ratio."),
    (ledger.InvalidNewProvider("", U, "no_name"),
     'Unable to create resource provider "", rp-1: Object action create failed because: '
     "name is required"),
    (ledger.InvalidNewProvider("a", U, "own_parent"),
     'Unable to create resource provider "a", rp-1: Object action create failed because: '
     "parent provider UUID cannot be same as UUID. Please set parent provider UUID to None "
     "if there is no parent."),
    (ledger.InvalidNewProvider("a", U, "no_parent"),
     'Unable to create resource provider "a", rp-1: Object action create failed because: '
     "parent provider UUID does not exist."),
    (ledger.InvalidTreeChange(U, "no_parent"),
     "Unable to save resource provider rp-1: Object action create failed because: parent "
     "provider UUID does not exist."),
    (ledger.InvalidTreeChange(U, "reparent"),
     "Unable to save resource provider rp-1: Object action update failed because: "
     "re-parenting a provider is not currently allowed."),
    (ledger.InvalidTreeChange(U, "unparent"),
     "Unable to save resource provider rp-1: Object action update failed because: "
     "un-parenting a provider is not currently allowed."),
    (ledger.InvalidTreeChange(U, "loop"),
     "Unable to save resource provider rp-1: Object action update failed because: "
     "creating loop in the provider tree is not allowed."),
    (ledger.StandardResourceClass("VCPU", "delete"),
     "Cannot delete standard resource class VCPU."),
    (ledger.StandardResourceClass("VCPU", "update"), "Cannot update standard resource class VCPU"),
    (ledger.StandardTrait("HW_CPU_X86_AVX"), "Cannot delete standard trait HW_CPU_X86_AVX."),
    (ledger.AllocationWithoutInventory(["VCPU", "DISK_GB"], [U, R]),
     "Unable to allocate inventory: Inventory for 'VCPU, DISK_GB' on resource provider "
     "'rp-1, rp-2' invalid."),
    (ledger.AllocationBreaksConstraints("VCPU", U),
     "Unable to allocate inventory: Unable to create allocation for 'VCPU' on resource "
     "provider 'rp-1'. The requested amount would violate inventory constraints."),
    (ledger.AllocationOverCapacity("VCPU", U),
     "Unable to allocate inventory: Unable to create allocation for 'VCPU' on resource "
     "provider 'rp-1'. The requested amount would exceed the capacity."),
    (ledger.DuplicateProvider("name", "a"),
     "Conflicting resource provider name: a already exists."),
    (ledger.ProviderHasChildren(U),
     "Unable to delete parent resource provider rp-1: It has child resource providers."),
    (ledger.ProviderInUse(U),
     "Unable to delete resource provider rp-1: Resource provider has allocations."),
    (ledger.InventoryInUse(["VCPU", "DISK_GB"], U),
     "Inventory for 'VCPU, DISK_GB' on resource provider 'rp-1' in use."),
    (ledger.InventoryExists("VCPU", U),
     "Update conflict: Inventory for 'VCPU' on resource provider 'rp-1' already exists."),
    (ledger.ResourceClassExists("CUSTOM_X"), "Resource class CUSTOM_X already exists."),
    (ledger.ResourceClassInUse("CUSTOM_X"),
     "Cannot delete resource class CUSTOM_X. Class is in use in inventory."),
    (ledger.ResourceClassIdsContended("CUSTOM_X"),
     "Max retries of DB transaction exceeded attempting to create resource class: CUSTOM_X, "
     "please try again."),
    (ledger.TraitInUse("CUSTOM_T"), "The trait CUSTOM_T is in use by a resource provider."),
    (ledger.ProviderGenerationConflict(U, 3, 2),
     "resource provider generation conflict for provider rp-1: actual: 3, given: 2"),
    (ledger.ConsumerGenerationConflict("c-1", None, 2),
     "consumer generation conflict - expected null but got 2"),
    (ledger.ConsumerGenerationConflict("c-1", 4, None),
     "consumer generation conflict - expected 4 but got None"),
    (ledger.RetriesExhausted(),
     "Another thread concurrently updated the resource provider data. Please retry your "
     "update"),
    (ledger.TooManyCandidates(100000),
     "This request matches more allocation candidates than one answer may hold (more than "
     "100000 allocation entries, [allotment] candidates_max_entries). Pass limit=N, or "
     "narrow the request: group_policy=isolate, fewer or larger granular groups, required "
     "traits, member_of or in_tree."),
    (ledger.CandidatesTooSlow(12.5),
     "This request could not be answered within 12.5 seconds ([allotment] "
     "candidates_time_limit). Pass limit=N, or narrow the request: group_policy=isolate, "
     "fewer granular groups, required traits, member_of or in_tree."),
    (ledger.CandidatesBusy(2),
     "This server is already answering as many large allocation candidates requests as it "
     "allows (2 per worker process, [allotment] candidates_large_slots). Retry later, or "
     "pass a smaller limit."),
    (ledger.ClientGone(), "The client closed the connection before the answer was ready."),
    (ledger.ExcludedRootNotFound(U), "exclude_roots: no resource provider with uuid rp-1."),
    (ledger.ExcludedNotRoot(U, R), "exclude_roots: rp-1 is not a root provider (its root is "
                                   "rp-2)."),
    (ledger.AddedClassNotFound("CUSTOM_Z"), "add: no such resource class CUSTOM_Z."),
    (ledger.AddedCapacityOutOfRange("VCPU", 10, 1e30, 2**63 - 1),
     "add: the capacity of VCPU, 10 x 1e+30, is larger than 9223372036854775807, the most "
     "this service can count."),
]

# The request facts the endpoint tables' words may name.
REQUEST = {"uuid": U, "consumer_uuid": "c-1", "resource_class": "VCPU"}


def _refusal_classes(base: type[ledger.LedgerError]) -> set[type[ledger.LedgerError]]:
    found: set[type[ledger.LedgerError]] = set()
    for sub in base.__subclasses__():
        found |= {sub} | _refusal_classes(sub)
    return found


# The classes that only group the cases below them: never raised themselves.
_GROUPS = {ledger.InvalidAllocation, ledger.BadWhatIf}


def _endpoint_tables() -> dict[str, refusals.Endpoint]:
    return {name: value for name, value in vars(refusals).items()
            if name.isupper() and not name.startswith("_") and name != "REFUSALS"
            and isinstance(value, dict)}


@pytest.mark.parametrize("exc, words", DEFAULT_WORDS,
                         ids=[f"{type(e).__name__}-{i}" for i, (e, _) in enumerate(DEFAULT_WORDS)])
def test_default_words(exc: ledger.LedgerError, words: str) -> None:
    assert refusals.message(exc) == words
    assert refusal(exc).message == words


def test_every_refusal_is_worded() -> None:
    """Each class the domain may raise has its pinned words and an answer."""
    raised = _refusal_classes(ledger.LedgerError) - _GROUPS
    assert raised == {type(exc) for exc, _ in DEFAULT_WORDS}
    for kind in raised:
        assert kind in refusals.REFUSALS, kind.__name__


def test_the_domain_says_facts_not_words() -> None:
    """``str(exc)`` is for logs: the class and its facts, never a message."""
    assert str(ledger.ProviderNotFound(U)) == "ProviderNotFound(uuid='rp-1')"
    assert (str(ledger.InventoryInUse(["VCPU"], U))
            == "InventoryInUse(resource_classes=['VCPU'], provider_uuid='rp-1')")
    assert str(ledger.ClientGone()) == "ClientGone()"
    for exc, words in DEFAULT_WORDS:
        assert str(exc) != words
        assert str(exc).startswith(type(exc).__name__ + "(")


def test_endpoint_tables_word_every_entry() -> None:
    """Each named table lists refusals ``REFUSALS`` answers, and words each one."""
    samples = {type(exc): exc for exc, _ in DEFAULT_WORDS}
    tables = _endpoint_tables()
    assert "INVENTORY_UPDATE" in tables and "PROVIDER_USAGES" in tables
    for name, table in tables.items():
        for kind, entry in table.items():
            exc = samples[kind]
            words = entry.words if isinstance(entry, refusals.Variant) else entry
            said = words(exc, REQUEST)
            assert isinstance(said, str) and said, (name, kind.__name__)


@pytest.mark.parametrize("table, exc, request_facts, words", [
    # The subtle ones: the reason twice, a suffix, the URL's values.
    (refusals.PROVIDER_USAGES, ledger.ProviderNotFound(U), {},
     "No resource provider with uuid rp-1 found: No resource provider with uuid rp-1 found"),
    (refusals.PROVIDER_DELETE, ledger.ProviderNotFound(U), {},
     "No resource provider with uuid rp-1 found for delete"),
    (refusals.INVENTORY_READ, ledger.ProviderNotFound(U), {"uuid": U},
     "No resource provider with uuid rp-1 found : No resource provider with uuid rp-1 found"),
    (refusals.INVENTORY_DELETE, ledger.InventoryNotFound(U, "VCPU"), {"resource_class": "VCPU"},
     "No inventory of class VCPU found for delete: No inventory of class VCPU found for "
     "delete"),
    (refusals.ALLOCATIONS_POST, ledger.UnknownResourceClass("CUSTOM_Y"), {},
     "Unable to allocate inventory No such resource class CUSTOM_Y."),
    (refusals.ALLOCATIONS_PUT, ledger.RetriesExhausted(), {"consumer_uuid": "c-1"},
     "Inventory and/or allocations changed while attempting to allocate: Another thread "
     "concurrently updated the resource provider data. Please retry your update"),
    (refusals.PROVIDER_TRAITS_UPDATE, ledger.UnknownTraits(["B", "A"]), {},
     "No such trait A, B"),
    (refusals.TRAIT, ledger.TraitNotFound("CUSTOM_T"), {}, "No such trait(s): CUSTOM_T."),
])
def test_endpoint_words(table: refusals.Endpoint, exc: ledger.LedgerError,
                        request_facts: dict[str, str], words: str) -> None:
    with pytest.raises(errors.PlacementError) as caught, explain(table, **request_facts):
        raise exc
    assert caught.value.message == words


def test_an_endpoint_may_answer_otherwise() -> None:
    """A ``Variant`` overrides status and code; a refusal not listed passes through."""
    with pytest.raises(errors.PlacementError) as caught, \
            explain(refusals.INVENTORY_UPDATE, uuid=U):
        raise ledger.InventoryNotFound(U, "VCPU")
    assert (caught.value.status, caught.value.code) == (400, errors.DEFAULT)
    assert refusal(ledger.InventoryNotFound(U, "VCPU")).status == 404
    with pytest.raises(ledger.ProviderHasChildren), explain(refusals.INVENTORY_UPDATE, uuid=U):
        raise ledger.ProviderHasChildren(U)


def test_retry_after_comes_with_the_refusal() -> None:
    refused = refusal(ledger.CandidatesBusy(2))
    assert refused.status == 503
    assert refused.headers == {"Retry-After": "1"}
