"""Consumer records over HTTP: they come and go with the allocations they hold."""

from __future__ import annotations

from allotment.db import tables as t
from tests.support.claims_support import provider_with, put, state, usages

C1 = "11111111-1111-1111-1111-111111111111"
C2 = "22222222-2222-2222-2222-222222222222"


def test_an_empty_claim_for_a_new_consumer_writes_nothing(client, database):
    rp = provider_with(client, "cn", VCPU=8)
    before = state(database)
    assert put(client, C1, {}, generation=None).status == 204
    resp = client.post("/allocations", {C2: {"allocations": {}, "project_id": "proj",
                                             "user_id": "user", "consumer_generation": None}},
                       version="1.28")
    assert resp.status == 204, resp
    # No consumer, project or user rows, and no provider generation bumped.
    assert state(database) == before
    assert client.get(f"/allocations/{C1}", version="1.38").json() == {"allocations": {}}
    assert usages(client, rp) == {"VCPU": 0}


def test_a_consumer_that_holds_nothing(client, database):
    """A consumer row without allocations, as an older upstream could leave behind."""
    rp = provider_with(client, "cn", VCPU=8)
    with database.engine.begin() as conn:
        project = conn.execute(t.projects.insert().values(external_id="proj"))
        user = conn.execute(t.users.insert().values(external_id="user"))
        conn.execute(t.consumers.insert().values(
            uuid=C1, project_id=project.inserted_primary_key[0],
            user_id=user.inserted_primary_key[0], generation=3))
    before = state(database)
    resp = client.delete(f"/allocations/{C1}")
    assert resp.status == 404, resp
    assert f"No allocations for consumer '{C1}'" in resp.detail
    assert state(database) == before
    # Its generation still counts for a new claim.
    resp = put(client, C1, {rp: {"VCPU": 1}}, generation=None)
    assert resp.status == 409 and "expected 3 but got None" in resp.detail, resp
    assert put(client, C1, {rp: {"VCPU": 1}}, generation=3).status == 204
    assert client.get(f"/allocations/{C1}", version="1.28").json()["consumer_generation"] == 4
