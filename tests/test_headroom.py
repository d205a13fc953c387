"""GET /headroom: how many more consumers of a candidates request fit.

Checked three ways on small clouds, on every backend: against numbers worked
out by hand; against a brute-force count (the most consumers whose allocation
requests, as GET /allocation_candidates lists them before any is claimed,
fit together in the providers' free capacity: headroom may count fewer, a
greedy packing's, never more); and by claiming that many for real, each the
first candidate GET /allocation_candidates lists, with PUT /allocations: every
claim succeeds, and then no candidate is left (one more does not fit).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import uuid as uuidlib

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from allotment.candidates import headroom as domain
from allotment.candidates.budget import Budget, Limits, Slots
from allotment.candidates.model import ReadModel
from allotment.candidates.request import CandidateRequest, RequestGroup
from allotment.ledger.errors import CandidatesBusy, CandidatesTooSlow
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.candidates_cloud import SHARES, Cloud
from tests.support.client import PlacementClient
from tests.test_allocation_candidates_property import build, clouds, params, queries
from tests.test_explain import path_for

PATH = "/headroom"
AVX2 = "HW_CPU_X86_AVX2"


def headroom(cloud: Cloud, version: str = "1.39", **query) -> dict:
    resp = cloud.client.get(path_for(PATH, query), version=version)
    assert resp.status == 200, resp
    body = resp.json()
    counts = [root["count"] for root in body["roots"]]
    assert all(n > 0 for n in counts) and counts == sorted(counts, reverse=True)
    if "limit" not in query:
        assert sum(counts) + sum(a["total"] for a in body.get("added", ())) == body["total"]
    return body


def by_name(body: dict) -> dict[str, int]:
    return {root["name"]: root["count"] for root in body["roots"]}


def claim_first_until_none(cloud: Cloud, version: str = "1.39", **query) -> list[dict]:
    """The plain scheduler: claim the first candidate listed, until none is; each
    claim must succeed. The allocation requests claimed."""
    claimed: list[dict] = []
    claim_version = "1.37" if version >= "1.34" else "1.28"
    while True:
        resp = cloud.client.get(path_for("/allocation_candidates", {**query, "limit": 1}),
                                version=version)
        assert resp.status == 200, resp
        found = resp.json()["allocation_requests"]
        if not found:
            return claimed
        claim = dict(found[0], project_id=str(uuidlib.uuid4()), user_id=str(uuidlib.uuid4()),
                     consumer_generation=None)
        put = cloud.client.put(f"/allocations/{uuidlib.uuid4()}", claim, version=claim_version)
        assert put.status == 204, (put, found[0], len(claimed))
        claimed.append(found[0])
        assert len(claimed) <= 500, "the test cloud should fill up sooner"


def most_that_fit(cloud: Cloud, version: str = "1.39", **query) -> int:
    """Brute force: the most consumers whose allocation requests (any of those listed
    now, each as often as wanted) fit together in the free capacity."""
    resp = cloud.client.get(path_for("/allocation_candidates", query), version=version)
    assert resp.status == 200, resp
    body = resp.json()
    free = {(rp, rc): numbers["capacity"] - numbers["used"]
            for rp, summary in body["provider_summaries"].items()
            for rc, numbers in summary["resources"].items()}
    keys = sorted(free)
    shapes = sorted({tuple(request["allocations"].get(rp, {}).get("resources", {}).get(rc, 0)
                           for rp, rc in keys)
                     for request in body["allocation_requests"]})

    @functools.cache
    def best(left: tuple[int, ...], start: int) -> int:
        found = 0
        for index in range(start, len(shapes)):
            shape = shapes[index]
            if all(need <= room for need, room in zip(shape, left, strict=True)):
                rest = tuple(room - need for need, room in zip(shape, left, strict=True))
                found = max(found, 1 + best(rest, index))
        return found

    return best(tuple(free[key] for key in keys), 0)


def check_against_claims(cloud: Cloud, version: str = "1.39", **query) -> dict:
    """Headroom's answer, checked against the brute force and real claims (which
    fill the cloud: call it last)."""
    body = headroom(cloud, version, **query)
    most = most_that_fit(cloud, version, **query)
    assert body["total"] <= most, (body, most)
    if body["optimal"]:
        assert body["total"] == most, (body, most)
    claimed = claim_first_until_none(cloud, version, **query)
    assert len(claimed) == body["total"], (body, len(claimed))
    after = headroom(cloud, version, **query)
    assert after["total"] == 0 and after["roots"] == [], after
    return body


# --- clouds ------------------------------------------------------------------------

def flat(client) -> Cloud:
    cloud = Cloud(client)
    cloud.provider("cn-a", VCPU={"total": 8, "allocation_ratio": 2.0},
                   MEMORY_MB={"total": 8192, "reserved": 1024}, traits=[AVX2],
                   aggregates=["agg1"])
    cloud.provider("cn-b", VCPU=4, MEMORY_MB=16384, traits=[AVX2], aggregates=["agg1", "agg2"])
    cloud.provider("cn-c", VCPU=32, MEMORY_MB=65536, aggregates=["agg2"])
    cloud.provider("cn-d", VCPU={"total": 16, "min_unit": 2, "step_size": 2}, MEMORY_MB=4096,
                   traits=[AVX2])
    cloud.consume({"cn-a": {"VCPU": 3}})
    return cloud


def nested(client) -> Cloud:
    cloud = Cloud(client)
    cloud.provider("host", DISK_GB=100)
    for n, fpgas in ((0, 1), (1, 2)):
        cloud.provider(f"numa{n}", parent="host", VCPU=4, MEMORY_MB=4096)
        cloud.provider(f"fpga{n}", parent=f"numa{n}", CUSTOM_FPGA=fpgas)
    return cloud


def sharing(client) -> Cloud:
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=4, aggregates=["pool"])
    cloud.provider("cn2", VCPU=4, aggregates=["pool"])
    cloud.provider("ss", DISK_GB=50, traits=[SHARES], aggregates=["pool"])
    cloud.provider("cn3", VCPU=4, DISK_GB=20)
    return cloud


# --- the single path: exact, and the most that fits ------------------------------------

def test_flat_counts_each_provider_by_the_capacity_rule(client):
    cloud = flat(client)
    body = headroom(cloud, resources="VCPU:2,MEMORY_MB:1024")
    # cn-a: 13 VCPU free of 16 and 7168 MB: 6; cn-b: 4 VCPU: 2; cn-c: 16; cn-d: 4 GiB: 4.
    assert by_name(body) == {"cn-c": 16, "cn-a": 6, "cn-d": 4, "cn-b": 2}
    assert body["total"] == 28 and body["optimal"] is True
    assert [r["name"] for r in body["roots"]] == ["cn-c", "cn-a", "cn-d", "cn-b"]
    assert body["roots"][0]["uuid"] == cloud.uuid("cn-c")
    assert "aggregates" not in body and "added" not in body and "excluded_roots" not in body
    # The unit rules: cn-d takes VCPU in steps of 2 from 2 on.
    assert by_name(headroom(cloud, resources="VCPU:3")) == {"cn-c": 10, "cn-a": 4, "cn-b": 1}
    assert "cn-d" not in by_name(headroom(cloud, resources="VCPU:1"))
    # Traits, and limit: the first roots only, the total of all.
    assert by_name(headroom(cloud, resources="VCPU:2,MEMORY_MB:1024", required=AVX2)) == {
        "cn-a": 6, "cn-d": 4, "cn-b": 2}
    limited = headroom(cloud, resources="VCPU:2,MEMORY_MB:1024", limit=2)
    assert limited["total"] == 28 and by_name(limited) == {"cn-c": 16, "cn-a": 6}
    # Nothing fits: 0, and that is the most.
    assert headroom(cloud, resources="VCPU:100") == {"total": 0, "optimal": True, "roots": []}


def test_per_aggregate_with_member_of(client):
    cloud = flat(client)
    agg1, agg2 = cloud.aggregate("agg1"), cloud.aggregate("agg2")
    body = headroom(cloud, resources="VCPU:2,MEMORY_MB:1024", member_of=agg1)
    assert by_name(body) == {"cn-a": 6, "cn-b": 2}
    assert body["aggregates"] == {agg1: 8}
    body = headroom(cloud, resources="VCPU:2,MEMORY_MB:1024", member_of=f"in:{agg1},{agg2}")
    # cn-b is in both: it counts toward each.
    assert body["total"] == 24 and body["aggregates"] == {agg1: 8, agg2: 18}
    # An aggregate nobody is in is named, with nothing.
    nobody = str(uuidlib.uuid4())
    body = headroom(cloud, resources="VCPU:2", member_of=f"in:{agg1},{nobody}")
    assert body["aggregates"] == {agg1: 8, nobody: 0}


def test_flat_claims_confirm_the_count(client):
    cloud = flat(client)
    body = check_against_claims(cloud, resources="VCPU:2,MEMORY_MB:1024", required=AVX2)
    assert body["total"] == 12


# --- the spread path: the engine's first candidate, tree after tree ----------------------

def test_nested_granular_same_subtree(client):
    cloud = nested(client)
    query = {"resources_CPU": "VCPU:2,MEMORY_MB:1024", "resources_ACC": "CUSTOM_FPGA:1",
             "same_subtree": "_CPU,_ACC", "group_policy": "isolate"}
    body = check_against_claims(cloud, **query)
    # numa0 has one FPGA below it, numa1 two (and VCPU for two).
    assert body["total"] == 3 and by_name(body) == {"host": 3}


def test_nested_unsuffixed_spread_over_the_tree(client):
    cloud = nested(client)
    body = check_against_claims(cloud, resources="VCPU:2,MEMORY_MB:1024,DISK_GB:10")
    assert body["total"] == 4 and body["optimal"] is False


def test_sharing_providers_are_used_up_tree_after_tree(client):
    cloud = sharing(client)
    body = headroom(cloud, resources="VCPU:1,DISK_GB:10")
    # cn1 comes first and takes 40 GB of the pool's 50, cn2 the last 10; cn3 has
    # its own disk for 2.
    assert by_name(body) == {"cn1": 4, "cn3": 2, "cn2": 1}
    assert body["total"] == 7
    # Without cn1, cn2 takes what cn1 took; without the pool, only cn3 has disk.
    assert by_name(headroom(cloud, resources="VCPU:1,DISK_GB:10",
                            exclude_roots=cloud.uuid("cn1"))) == {"cn2": 4, "cn3": 2}
    assert by_name(headroom(cloud, resources="VCPU:1,DISK_GB:10",
                            exclude_roots=cloud.uuid("ss"))) == {"cn3": 2}
    # Only the pool's disk: the placements count for the pool's own tree.
    assert by_name(headroom(cloud, resources="DISK_GB:10")) == {"ss": 5, "cn3": 2}
    check_against_claims(cloud, resources="VCPU:1,DISK_GB:10")


def test_isolate_greedy_is_no_optimum_and_says_so(client):
    """numa0 has 4 VCPU, numa1 2; A takes 1 and B 2, on different NUMA nodes. The
    first candidate puts A on numa0 and B on numa1, which fills numa1: one fits.
    A on numa1 and B on numa0, twice, would fit two."""
    cloud = Cloud(client)
    cloud.provider("host")
    cloud.provider("numa0", parent="host", VCPU=4)
    cloud.provider("numa1", parent="host", VCPU=2)
    query = {"resources_A": "VCPU:1", "resources_B": "VCPU:2", "group_policy": "isolate"}
    assert most_that_fit(cloud, **query) == 2
    body = check_against_claims(cloud, **query)
    assert body["total"] == 1 and body["optimal"] is False


def test_a_tree_stops_after_max_rounds(client, monkeypatch):
    cloud = nested(client)
    monkeypatch.setattr(domain, "MAX_ROUNDS", 1)
    body = headroom(cloud, resources_CPU="VCPU:2,MEMORY_MB:1024", resources_ACC="CUSTOM_FPGA:1",
                    same_subtree="_CPU,_ACC", group_policy="isolate")
    # The first walk's candidate (numa0 and its one FPGA), then the cap.
    assert body["total"] == 1 and body["capped"] == 1


def test_before_1_29_one_provider_per_tree(client):
    cloud = nested(client)
    # Before 1.29 a candidate never takes from two providers of one tree: the DISK_GB
    # of the root and the VCPU of a NUMA node cannot go together.
    assert headroom(cloud, "1.28", resources="VCPU:2,DISK_GB:10")["total"] == 0
    body = check_against_claims(cloud, "1.28", resources="VCPU:2,MEMORY_MB:1024")
    assert body["total"] == 4


# --- what-if ----------------------------------------------------------------------------

def test_excluded_roots_and_added_hosts(client):
    cloud = flat(client)
    query = {"resources": "VCPU:2,MEMORY_MB:1024"}
    body = headroom(cloud, **query, exclude_roots=f"{cloud.uuid('cn-c')},{cloud.uuid('cn-b')}")
    assert body["total"] == 10 and by_name(body) == {"cn-a": 6, "cn-d": 4}
    assert body["excluded_roots"] == [cloud.uuid("cn-c"), cloud.uuid("cn-b")]
    # Ten hosts of 8 VCPU at ratio 2 and 4 GiB: 4 each; two of 64 VCPU and 256 GiB: 32.
    body = headroom(cloud, **query, add=["10xVCPU:8*2,MEMORY_MB:4096",
                                         "2xVCPU:64,MEMORY_MB:262144,DISK_GB:2000"],
                    exclude_roots=cloud.uuid("cn-c").upper())
    assert body["added"] == [
        {"template": "10xVCPU:8*2,MEMORY_MB:4096", "hosts": 10, "each": 4, "total": 40},
        {"template": "2xVCPU:64,MEMORY_MB:262144,DISK_GB:2000", "hosts": 2, "each": 32,
         "total": 64}]
    assert body["total"] == 12 + 40 + 64 and body["optimal"] is True
    assert body["excluded_roots"] == [cloud.uuid("cn-c")]
    # Nothing was written: the real cloud answers as before.
    assert headroom(cloud, **query)["total"] == 28


def test_added_hosts_have_no_traits_and_no_aggregates(client):
    cloud = flat(client)
    add = "5xVCPU:16,MEMORY_MB:16384"
    assert headroom(cloud, resources="VCPU:2", add=add)["added"][0]["each"] == 8
    for query in ({"required": AVX2}, {"member_of": cloud.aggregate("agg1")},
                  {"root_required": AVX2}, {"in_tree": cloud.uuid("cn-a")},
                  {"resources": "VCPU:2,DISK_GB:1"}):
        body = headroom(cloud, **{"resources": "VCPU:2", **query}, add=add)
        assert body["added"][0]["each"] == 0, query
    # Forbidden traits and aggregates they pass.
    body = headroom(cloud, resources="VCPU:2", required="!" + AVX2, add=add,
                    member_of="!" + cloud.aggregate("agg2"))
    assert body["added"][0]["each"] == 8 and body["total"] == 40


def test_added_hosts_with_granular_groups(client):
    cloud = Cloud(client)
    add = "3xVCPU:8,MEMORY_MB:4096"
    query = {"resources1": "VCPU:2", "resources2": "MEMORY_MB:1024"}
    body = headroom(cloud, **query, group_policy="none", add=add)
    assert body["added"][0]["each"] == 4 and body["total"] == 12
    # One provider cannot serve two isolated groups.
    assert headroom(cloud, **query, group_policy="isolate", add=add)["total"] == 0


@pytest.mark.parametrize("query, words", [
    ({"add": "0xVCPU:8"}, "imagines 1 to 100000 hosts"),
    ({"add": "100001xVCPU:8"}, "imagines 1 to 100000 hosts"),
    ({"add": "xVCPU:8"}, "Expected 'add' in the form"),
    ({"add": "2xVCPU"}, "Expected 'add' in the form"),
    ({"add": "2xVCPU:8,"}, "Expected 'add' in the form"),
    ({"add": "2xvcpu:8"}, "Expected 'add' in the form"),
    ({"add": "2xVCPU:-1"}, "Expected 'add' in the form"),
    ({"add": "2xVCPU:0"}, "the total of VCPU must be 1 to 2147483647"),
    ({"add": "2xVCPU:4294967296"}, "the total of VCPU must be 1 to 2147483647"),
    ({"add": "2xVCPU:8*0"}, "the allocation ratio of VCPU must be above 0"),
    ({"add": "2xVCPU:8*1e3"}, "Expected 'add' in the form"),
    ({"add": "2xVCPU:8,VCPU:4"}, "names VCPU twice"),
    ({"add": "2xCUSTOM_NOPE:8"}, "add: no such resource class CUSTOM_NOPE."),
    ({"add": "2xVCPU:2147483647*9999999"}, "is larger than 9007199254740991"),
    ({"exclude_roots": "cn-a"}, "Expected 'exclude_roots' to be a comma-separated list"),
    ({"exclude_roots": ""}, "Expected 'exclude_roots' to be a comma-separated list"),
    ({"exclude_roots": "00000000-0000-0000-0000-00000000000a"},
     "exclude_roots: no resource provider with uuid 00000000-0000-0000-0000-00000000000a."),
])
def test_what_if_refusals(client, query, words):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU=8)
    resp = client.get(path_for(PATH, {"resources": "VCPU:1", **query}), version="1.39")
    assert resp.status == 400, resp
    assert resp.error_code == "placement.query.bad_value"
    assert words in resp.detail, resp.detail


def test_only_roots_can_be_excluded(client):
    cloud = nested(client)
    resp = client.get(path_for(PATH, {"resources": "VCPU:1",
                                      "exclude_roots": cloud.uuid("numa0")}), version="1.39")
    assert resp.status == 400, resp
    assert resp.detail.strip().endswith(f"exclude_roots: {cloud.uuid('numa0')} is not a root "
                                        f"provider (its root is {cloud.uuid('host')}).")


# --- the same request as GET /allocation_candidates ---------------------------------

@pytest.mark.parametrize("version, query", [
    ("1.39", ""),
    ("1.39", "resources=VCPU:x"),
    ("1.39", "resources=VCPU:0"),
    ("1.39", "resources=CUSTOM_NOPE:1"),
    ("1.39", "resources=VCPU:1&required=CUSTOM_NOPE"),
    ("1.39", "resources1=VCPU:1&resources2=VCPU:1"),
    ("1.39", "resources=VCPU:1&limit=0"),
    ("1.39", "resources=VCPU:1&explain_limit=3"),
    ("1.39", "resources=VCPU:1&member_of=nope"),
    ("1.39", "resources=VCPU:1&same_subtree=_A"),
    ("1.39", "resources=VCPU:1&required=HW_CPU_X86_AVX2,!HW_CPU_X86_AVX2"),
    ("1.20", "resources=VCPU:1&required=!HW_CPU_X86_AVX2"),
    ("1.24", "resources1=VCPU:1"),
])
def test_the_candidates_refusals(client, version, query):
    Cloud(client).provider("cn", VCPU=8)
    theirs = client.get(f"/allocation_candidates?{query}", version=version)
    ours = client.get(f"{PATH}?{query}", version=version)
    assert theirs.status == 400, theirs
    assert (ours.status, ours.error_code, ours.detail) == (
        theirs.status, theirs.error_code, theirs.detail)


def test_the_candidates_microversions_and_policy(client):
    Cloud(client).provider("cn", VCPU=8)
    assert client.get(f"{PATH}?resources=VCPU:1", version="1.9").status == 404
    assert client.get(f"{PATH}?resources=VCPU:1", version="1.10").json()["total"] == 8
    resp = client.request("GET", f"{PATH}?resources=VCPU:1", version="1.39",
                          token="someone:proj", headers={"X-Roles": "member"})
    assert resp.status == 403, resp
    assert "placement:allocation_candidates:list" in resp.detail
    # An unknown name where upstream finds nothing first: nothing fits, anywhere.
    body = client.get(f"{PATH}?resources1=VCPU:100&resources2=CUSTOM_NOPE:1"
                      "&group_policy=none&add=2xVCPU:1000", version="1.39")
    assert body.status == 200 and body.json()["total"] == 0, body


# --- the budget ---------------------------------------------------------------------

@pytest.fixture(params=["model", "database"])
def small_budget_app(request, database):
    """A count over more than 100 trees x slots is a large search (and takes a slot)."""
    return make_app(make_conf(database.url, allotment__candidates_source=request.param,
                              allotment__candidates_large_entries=100),
                    db=database.db, prepare=False)


def wide_pool(client) -> Cloud:
    """60 hosts sharing one disk pool: 60 trees of 2 slots for VCPU and DISK_GB."""
    cloud = sharing(client)
    for i in range(57):
        cloud.provider(f"cn-{i:02d}", VCPU=1, aggregates=["pool"])
    return cloud


def test_a_large_count_answers_as_a_small_one(small_budget_app, client):
    cloud = wide_pool(client)
    large = Cloud(PlacementClient(small_budget_app))
    query = {"resources": "VCPU:1,DISK_GB:10"}
    assert headroom(large, **query) == headroom(cloud, **query)


def test_a_large_count_is_refused_while_the_slots_are_taken(small_budget_app, client,
                                                            monkeypatch):
    wide_pool(client)
    monkeypatch.setattr(Slots, "take", lambda self: False)
    busy = PlacementClient(small_budget_app).get(f"{PATH}?resources=VCPU:1,DISK_GB:10",
                                                 version="1.39")
    assert busy.status == 503, busy
    assert busy.headers["retry-after"] == "1"
    # A small count needs no slot.
    small = PlacementClient(small_budget_app).get(f"{PATH}?resources=VCPU:4", version="1.39")
    assert small.status == 200 and small.json()["total"] == 3, small


def test_a_count_out_of_time_says_to_narrow_it(client, monkeypatch):
    wide_pool(client)
    monkeypatch.setattr("allotment.candidates.budget._STEPS_BETWEEN_CHECKS", 1)

    def out_of_time(self: Budget) -> None:
        raise CandidatesTooSlow(self.limits.time_limit)

    monkeypatch.setattr(Budget, "check", out_of_time)
    resp = client.get(f"{PATH}?resources=VCPU:1,DISK_GB:10", version="1.39")
    assert resp.status == 400, resp
    assert resp.error_code == "placement.query.bad_value"
    assert "This headroom count could not be finished within 20 seconds" in resp.detail


# --- on random small clouds ------------------------------------------------------------

@settings(max_examples=int(os.environ.get("HEADROOM_EXAMPLES", 20)), deadline=None,
          report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_clouds_claims_and_brute_force(client, database, data):
    """The candidates property test's clouds and queries (nested, sharing, traits,
    aggregates, granular groups, isolate, same_subtree, root_required, unit rules)."""
    database.reset()
    providers = data.draw(clouds())
    cloud = Cloud(client)
    build(cloud, providers, data)
    q = data.draw(queries(providers))
    body = check_against_claims(cloud, q.version, **params(q, cloud))
    event(f"total: {min(body['total'], 5)}{'+' if body['total'] >= 5 else ''}, "
          f"optimal: {body['optimal']}")


# --- what a count holds (issue 32, item 6) ---------------------------------------------

def _granular(groups: int) -> CandidateRequest:
    return CandidateRequest(tuple(RequestGroup(str(i), {"VCPU": 1})
                                  for i in range(1, groups + 1)), group_policy="none")


def test_imagined_hosts_are_counted_without_holding_the_model(client, database):
    """GET /headroom with many groups and thousands of ``add`` templates kept its
    worker's read model while it counted the imagined hosts (another client's
    candidates request waited seconds): the model is let go of first."""
    flat(client)
    model = ReadModel(database.db)
    checks = 0
    counting, more = threading.Event(), threading.Event()
    after_taken: list[int] = []

    def client_gone() -> bool:  # the budget's look at the clock, every 512 steps
        nonlocal checks
        checks += 1
        counting.set()
        if after_taken and checks > after_taken[0]:
            more.set()
        return False

    budget = Budget(Limits(time_limit=120.0, grace=120.0), Slots(1), client_gone)
    what_if = domain.WhatIf(add=tuple(domain.HostTemplate(1, (("VCPU", 64 + i, 1.0),))
                                      for i in range(3000)))
    found: list[domain.Headroom] = []
    worker = threading.Thread(target=lambda: found.append(domain.answer(
        database.db, model, _granular(20), what_if, budget)))
    worker.start()
    try:
        assert counting.wait(60)
        with model.current():
            after_taken.append(checks)
            # The count goes on while another request holds the model.
            assert more.wait(60), "the count waited for the read model"
    finally:
        worker.join(120)
    assert found and len(found[0].added) == 3000
    assert found[0].added[0].each == 3  # 64 VCPU for 20 one-unit groups on one host


def test_a_count_refused_for_lack_of_a_slot_never_takes_the_model(client, database,
                                                                 monkeypatch):
    """A count large by its shape (slots x providers) takes its slot before the read
    model: refused (503), it has not waited for nor read the model."""
    flat(client)
    model = ReadModel(database.db)
    with model.current():
        pass  # loaded: it knows how many providers there are
    taken = []
    monkeypatch.setattr(model, "held", lambda: taken.append(1) or contextlib.nullcontext())
    slots = Slots(1)
    assert slots.take()  # another large search runs
    budget = Budget(Limits(large_entries=50), slots)
    with pytest.raises(CandidatesBusy):
        domain.answer(database.db, model, _granular(20), budget=budget)
    assert not taken
    # Small by its shape: no slot needed up front.
    assert domain.answer(database.db, ReadModel(database.db), _granular(1),
                         budget=Budget(Limits(large_entries=50), slots)).total > 0


def test_at_most_100_templates(client):
    flat(client)
    query = "&".join(f"add=1xVCPU:{64 + i}" for i in range(101))
    resp = client.get(f"{PATH}?resources=VCPU:1&{query}", version="1.39")
    assert resp.status == 400, resp
    assert "'add' may be given at most 100 times" in resp.detail
    query = "&".join(f"add=1xVCPU:{64 + i}" for i in range(100))
    assert client.get(f"{PATH}?resources=VCPU:1&{query}", version="1.39").status == 200
