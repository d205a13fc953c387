"""The capacity guard's refusal, from the migration's triggers to the classifier and HTTP.

Migration 0002 installs triggers that refuse an allocation row taking a
provider over capacity, with the codes and words of ``allotment.db.guard``;
``allotment.db.errors`` reads the same module to recognize the refusal. Here
the triggers refuse a row written by raw SQL, as any other writer's would be,
and the classifier must name it ``CapacityGuardRefusal`` with the row's
provider and class: if the codes or words the triggers use drifted from what
the classifier reads, this fails. SQLite has no guard (its writers hold the
database's one write lock, see the migration), so there is nothing to test.
"""

from __future__ import annotations

import re
import uuid

import pytest
import sqlalchemy as sa

from allotment.db import errors, guard
from allotment.db import tables as t
from allotment.ledger import allocations
from allotment.ledger.common import STANDARD_CLASS_IDS, class_ids
from tests.support.claims_support import provider_with, put, state

VCPU = STANDARD_CLASS_IDS["VCPU"]


@pytest.fixture
def guarded(database):
    if database.backend == "sqlite":
        pytest.skip("SQLite has no capacity guard: its writers hold the one write lock")
    return database


def _provider_id(database, rp_uuid: str) -> int:
    with database.engine.connect() as conn:
        return conn.execute(sa.select(t.resource_providers.c.id)
                            .where(t.resource_providers.c.uuid == rp_uuid)).scalar_one()


def _insert_allocation(database, provider_id: int, used: int) -> None:
    """One allocation row, by raw SQL: what any writer sharing the database may do."""
    with database.engine.begin() as conn:
        conn.execute(sa.text(
            "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, "
            "used, created_at) VALUES (:provider, :consumer, :class_id, :used, "
            "CURRENT_TIMESTAMP)"),
            {"provider": provider_id, "consumer": str(uuid.uuid4()), "class_id": VCPU,
             "used": used})


def _refusal_of_a_row_over_capacity(database, client) -> errors.DriverError | None:
    """What the classifier makes of the triggers' answer to a row 1 VCPU over capacity."""
    provider_id = _provider_id(database, provider_with(client, "cn", VCPU=4))
    _insert_allocation(database, provider_id, 3)  # within capacity: accepted
    with pytest.raises(sa.exc.DBAPIError) as refused:
        _insert_allocation(database, provider_id, 2)
    found = errors.meaning(refused.value)
    if isinstance(found, errors.CapacityGuardRefusal):
        assert (found.provider_id, found.class_id) == (provider_id, VCPU)
    return found


def test_the_triggers_refusal_is_classified_as_the_guards(guarded, client):
    found = _refusal_of_a_row_over_capacity(guarded, client)
    assert isinstance(found, errors.CapacityGuardRefusal), found


def test_the_classifier_reads_the_guards_codes(guarded, client, monkeypatch):
    # A guard against a blind test: the same refusal with other codes or words
    # in allotment.db.guard (the triggers keep theirs) is no longer recognized.
    monkeypatch.setattr(guard, "SQLSTATE", "AL999")
    monkeypatch.setattr(guard, "MYSQL_ERRNO", 3999)
    assert _refusal_of_a_row_over_capacity(guarded, client) is None
    monkeypatch.undo()
    guarded.reset()
    monkeypatch.setattr(guard, "REFUSED_ROW", re.compile("another guard: (\\d+) (\\d+)"))
    assert _refusal_of_a_row_over_capacity(guarded, client) is None


def test_a_claim_the_guard_refuses_gets_the_answer_of_our_own_check(guarded, client,
                                                                     monkeypatch):
    # As when another writer (upstream Placement) committed between our
    # check and our insert: the guard's refusal is the usual 409, word for word.
    rp = provider_with(client, "cn", VCPU=4)
    assert put(client, str(uuid.uuid4()), {rp: {"VCPU": 3}}).status == 204
    before = state(guarded)
    ours = put(client, str(uuid.uuid4()), {rp: {"VCPU": 2}})
    # Our check left out: it only names the class ids, as it does when all fits.
    monkeypatch.setattr(allocations, "_check_capacity",
                        lambda conn, *_args: class_ids(conn, ["VCPU"]))
    guards = put(client, str(uuid.uuid4()), {rp: {"VCPU": 2}})
    assert ours.status == guards.status == 409
    assert guards.error_code == ours.error_code
    assert guards.detail == ours.detail
    assert "The requested amount would exceed the capacity." in guards.detail
    assert state(guarded) == before


# --- the rule over whole statements and transactions (migration 0004) ---------

def _rows(provider_id: int, amounts: list[int], consumer: str | None = None) -> list[dict]:
    return [{"provider": provider_id, "consumer": consumer or str(uuid.uuid4()),
             "class_id": VCPU, "used": used} for used in amounts]


_INSERT = sa.text(
    "INSERT INTO allocations (resource_provider_id, consumer_id, resource_class_id, used, "
    "created_at) VALUES (:provider, :consumer, :class_id, :used, CURRENT_TIMESTAMP)")


def _insert_one_statement(conn: sa.Connection, rows: list[dict]) -> None:
    """Rows in ONE multi-row INSERT statement (not the driver's executemany)."""
    values = ", ".join(f"(:p{i}, :c{i}, :k{i}, :u{i}, CURRENT_TIMESTAMP)"
                       for i in range(len(rows)))
    params: dict = {}
    for i, row in enumerate(rows):
        params.update({f"p{i}": row["provider"], f"c{i}": row["consumer"],
                       f"k{i}": row["class_id"], f"u{i}": row["used"]})
    conn.execute(sa.text("INSERT INTO allocations (resource_provider_id, consumer_id, "
                         f"resource_class_id, used, created_at) VALUES {values}"), params)


def _used(database, provider_id: int) -> int:
    with database.engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.coalesce(sa.func.sum(t.allocations.c.used), 0))
                                .where(t.allocations.c.resource_provider_id == provider_id))
                   .scalar_one())


@pytest.mark.parametrize("amounts, accepted", [([2, 2], True), ([2, 2, 1], False),
                                               ([1, 1, 1, 1], True), ([4, 1], False)])
def test_a_statement_of_many_rows_is_judged_as_its_rows_one_by_one(guarded, client, amounts,
                                                                    accepted):
    # Each row alone fits a capacity of 4; together some do not.
    provider_id = _provider_id(guarded, provider_with(client, "cn", VCPU=4))
    if accepted:
        with guarded.engine.begin() as conn:
            _insert_one_statement(conn, _rows(provider_id, amounts))
        assert _used(guarded, provider_id) == sum(amounts)
    else:
        with pytest.raises(sa.exc.DBAPIError) as refused, guarded.engine.begin() as conn:
            _insert_one_statement(conn, _rows(provider_id, amounts))
        assert isinstance(errors.meaning(refused.value), errors.CapacityGuardRefusal)
        assert _used(guarded, provider_id) == 0


def test_a_transaction_may_swap_within_a_provider_over_capacity(guarded, client):
    """Over capacity (its inventory shrank under its allocations), a provider may
    still have a consumer's row replaced by no more than it was; not by more."""
    rp = provider_with(client, "cn", VCPU=8)
    provider_id = _provider_id(guarded, rp)
    # Through the API: the consumer rows exist, as every writer keeps them
    # (MySQL's credit is checked against the deleting consumer's row).
    consumer = str(uuid.uuid4())
    assert put(client, consumer, {rp: {"VCPU": 6}}).status == 204
    assert put(client, str(uuid.uuid4()), {rp: {"VCPU": 2}}).status == 204
    with guarded.engine.begin() as conn:
        conn.execute(t.inventories.update().values(total=4)
                     .where(t.inventories.c.resource_provider_id == provider_id))

    def replace(amount: int) -> None:
        with guarded.engine.begin() as conn:
            conn.execute(t.allocations.delete().where(t.allocations.c.consumer_id == consumer))
            _insert_one_statement(conn, _rows(provider_id, [amount], consumer))

    replace(6)  # 6 for 6: no worse than before
    assert _used(guarded, provider_id) == 8
    with pytest.raises(sa.exc.DBAPIError) as refused:
        replace(7)  # 7 for 6
    assert isinstance(errors.meaning(refused.value), errors.CapacityGuardRefusal)
    assert _used(guarded, provider_id) == 8
    replace(1)  # giving back is always allowed
    assert _used(guarded, provider_id) == 3
