"""GET /explain/allocation_candidates: the candidates, and why the other trees are out."""

from __future__ import annotations

import json
import logging
import random
import time
import uuid as uuidlib
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger.common import STANDARD_CLASS_IDS
from tests.support.candidates_cloud import SHARES, Cloud

PATH = "/explain/allocation_candidates"
BAD_VALUE = "placement.query.bad_value"
FILTERS = {"unknown_name", "unknown_aggregate", "unknown_in_tree", "in_tree", "member_of",
           "forbidden_aggregate", "required_trait", "forbidden_trait", "no_inventory",
           "capacity", "min_unit", "max_unit", "step_size", "root_required", "root_forbidden",
           "group_policy_isolate", "same_subtree", "combination", "limit"}


def path_for(base: str, params: dict) -> str:
    pairs = [(key, item) for key, value in params.items()
             for item in (value if isinstance(value, list) else [value])]
    return f"{base}?{urlencode(pairs, safe=':,!*')}" if pairs else base


def explain(cloud: Cloud, version: str = "1.39", **params) -> dict:
    resp = cloud.client.get(path_for(PATH, params), version=version)
    assert resp.status == 200, resp
    body = resp.json()
    check_contract(body["explanation"])
    return body


def check_contract(explanation: dict) -> None:
    """The keys the dashboard reads, on every answer."""
    trees = explanation["trees"]
    assert trees["total"] == trees["qualified"] + trees["excluded"]
    for step in explanation["steps"]:
        assert {"group", "filter", "providers", "detail"} <= step.keys()
    for reason in explanation["reasons"]:
        assert {"group", "filter", "resource_class", "trees", "detail"} <= reason.keys()
        assert reason["filter"] in FILTERS
    for tree in explanation["excluded"]:
        assert {"root_provider_uuid", "root_provider_name", "reasons"} <= tree.keys()
        assert tree["reasons"]
        for reason in tree["reasons"]:
            assert {"group", "filter", "provider_uuid", "resource_class",
                    "detail"} <= reason.keys()
            assert reason["filter"] in FILTERS and reason["detail"]


def excluded(body: dict) -> dict[str, list[dict]]:
    """root name -> its reasons."""
    return {tree["root_provider_name"]: tree["reasons"]
            for tree in body["explanation"]["excluded"]}


def only_reason(body: dict, name: str) -> dict:
    reasons = excluded(body)[name]
    assert len(reasons) == 1, reasons
    return reasons[0]


def counted(body: dict) -> dict[tuple, int]:
    return {(r["group"], r["filter"], r["resource_class"]): r["trees"]
            for r in body["explanation"]["reasons"]}


def trees(body: dict) -> tuple[int, int, int]:
    found = body["explanation"]["trees"]
    return found["total"], found["qualified"], found["excluded"]


# --- one filter at a time ------------------------------------------------------

def test_capacity_with_the_numbers(client):
    cloud = Cloud(client)
    cloud.provider("cn-17", VCPU=16, MEMORY_MB=4096)
    cloud.provider("cn-18", VCPU=8, MEMORY_MB=4096)
    cloud.consume({"cn-17": {"VCPU": 14}})
    body = explain(cloud, resources="VCPU:4")
    assert trees(body) == (2, 1, 1)
    assert only_reason(body, "cn-17") == {
        "group": "", "filter": "capacity", "provider_uuid": cloud.uuid("cn-17"),
        "resource_class": "VCPU", "requested": 4, "capacity": 16, "used": 14, "free": 2,
        "detail": "cn-17 has 2 VCPU free of 16, 4 requested"}
    assert body["explanation"]["reasons"] == [{
        "group": "", "filter": "capacity", "resource_class": "VCPU", "trees": 1,
        "detail": "1 tree: no provider has 4 VCPU free"}]
    assert excluded(body).keys() == {"cn-17"}


def test_capacity_counts_reserved_and_allocation_ratio(client):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU={"total": 8, "reserved": 2, "allocation_ratio": 2.0})
    cloud.consume({"cn": {"VCPU": 10}})
    reason = only_reason(explain(cloud, resources="VCPU:3"), "cn")
    assert (reason["capacity"], reason["used"], reason["free"]) == (12, 10, 2)
    assert trees(explain(cloud, resources="VCPU:2")) == (1, 1, 0)


def test_no_inventory(client):
    cloud = Cloud(client)
    cloud.provider("cn", MEMORY_MB=1024)
    body = explain(cloud, resources="VCPU:1,MEMORY_MB:512")
    reason = only_reason(body, "cn")
    assert (reason["filter"], reason["resource_class"], reason["provider_uuid"]) == (
        "no_inventory", "VCPU", None)
    assert counted(body) == {("", "no_inventory", "VCPU"): 1}


@pytest.mark.parametrize("amount, filters", [
    (1, {("min_unit", "min_unit", 2), ("step_size", "step_size", 2)}),
    (3, {("step_size", "step_size", 2)}),
    (10, {("max_unit", "max_unit", 8)}),
])
def test_unit_rules(client, amount, filters):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU={"total": 16, "min_unit": 2, "max_unit": 8, "step_size": 2})
    reasons = excluded(explain(cloud, resources=f"VCPU:{amount}"))["cn"]
    assert {(r["filter"], key, r[key]) for r in reasons
            for key in ("min_unit", "max_unit", "step_size") if key in r} == filters
    assert all(r["requested"] == amount for r in reasons)


def test_required_and_forbidden_traits(client):
    cloud = Cloud(client)
    cloud.provider("plain", VCPU=8)
    cloud.provider("avx", VCPU=8, traits=["HW_CPU_X86_AVX2", "CUSTOM_GOLD"])
    body = explain(cloud, resources="VCPU:1", required="HW_CPU_X86_AVX2")
    reason = only_reason(body, "plain")
    assert reason["filter"] == "required_trait" and "HW_CPU_X86_AVX2" in reason["detail"]
    body = explain(cloud, resources="VCPU:1", required="!CUSTOM_GOLD")
    reason = only_reason(body, "avx")
    assert reason["filter"] == "forbidden_trait" and "CUSTOM_GOLD" in reason["detail"]
    assert reason["provider_uuid"] == cloud.uuid("avx")
    # Granular groups judge each provider on its own.
    body = explain(cloud, resources1="VCPU:1", required1="HW_CPU_X86_AVX2,!CUSTOM_GOLD")
    assert {r["filter"] for r in excluded(body)["plain"]} == {"required_trait"}
    assert {r["filter"] for r in excluded(body)["avx"]} == {"forbidden_trait"}
    assert counted(body) == {("1", "required_trait", None): 1,
                             ("1", "forbidden_trait", None): 1}


def test_every_reason_of_a_tree(client):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU=2, traits=["CUSTOM_GOLD"])
    body = explain(cloud, resources="VCPU:4", required="HW_CPU_X86_AVX2,!CUSTOM_GOLD")
    assert sorted(r["filter"] for r in excluded(body)["cn"]) == [
        "capacity", "forbidden_trait", "required_trait"]
    assert len(counted(body)) == 3


def test_aggregates(client):
    cloud = Cloud(client)
    cloud.provider("in-a", VCPU=8, aggregates=["a"])
    cloud.provider("in-b", VCPU=8, aggregates=["b"])
    a, b = cloud.aggregate("a"), cloud.aggregate("b")
    body = explain(cloud, resources="VCPU:1", member_of=a)
    assert trees(body) == (2, 1, 1)
    reason = only_reason(body, "in-b")
    assert reason["filter"] == "member_of" and a in reason["detail"]
    body = explain(cloud, resources="VCPU:1", member_of="!" + b)
    reason = only_reason(body, "in-b")
    assert reason["filter"] == "forbidden_aggregate" and b in reason["detail"]
    body = explain(cloud, resources1="VCPU:1", member_of1=a)
    assert only_reason(body, "in-b")["filter"] == "member_of"
    unknown = str(uuidlib.uuid4())
    body = explain(cloud, resources="VCPU:1", member_of=unknown)
    assert trees(body) == (2, 0, 2)
    assert counted(body) == {("", "unknown_aggregate", None): 2}
    assert unknown in only_reason(body, "in-a")["detail"]
    assert body["explanation"]["steps"][0]["filter"] == "unknown_aggregate"


def test_in_tree(client):
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8)
    cloud.provider("cn2", VCPU=8)
    body = explain(cloud, resources="VCPU:1", in_tree=cloud.uuid("cn1"))
    assert trees(body) == (2, 1, 1)
    assert only_reason(body, "cn2")["filter"] == "in_tree"
    body = explain(cloud, resources="VCPU:1", in_tree=str(uuidlib.uuid4()))
    assert counted(body) == {("", "unknown_in_tree", None): 2}


def test_root_required(client):
    cloud = Cloud(client)
    cloud.provider("gold", VCPU=8, traits=["CUSTOM_GOLD"])
    cloud.provider("plain", VCPU=8)
    body = explain(cloud, resources="VCPU:1", root_required="CUSTOM_GOLD")
    reason = only_reason(body, "plain")
    assert (reason["group"], reason["filter"]) == ("*", "root_required")
    body = explain(cloud, resources="VCPU:1", root_required="!CUSTOM_GOLD")
    assert only_reason(body, "gold")["filter"] == "root_forbidden"
    assert trees(body) == (2, 1, 1)


def test_group_policy_isolate(client):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU=8)
    query = {"resources1": "VCPU:1", "resources2": "VCPU:1"}
    body = explain(cloud, **query, group_policy="isolate")
    reason = only_reason(body, "cn")
    assert (reason["group"], reason["filter"]) == ("1,2", "group_policy_isolate")
    assert trees(explain(cloud, **query, group_policy="none")) == (1, 1, 0)


def test_same_subtree(client):
    cloud = Cloud(client)
    cloud.provider("cn", MEMORY_MB=4096)
    cloud.provider("numa0", parent="cn", VCPU=4, traits=["HW_NUMA_ROOT"])
    cloud.provider("numa1", parent="cn", VCPU=4)
    cloud.provider("pf0", parent="numa0", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET1"])
    cloud.provider("pf1", parent="numa1", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET2"])
    query = {"resources_C": "VCPU:1", "required_C": "HW_NUMA_ROOT",
             "resources_N": "SRIOV_NET_VF:2", "group_policy": "none"}
    body = explain(cloud, **query, required_N="CUSTOM_PHYSNET2", same_subtree="_C,_N")
    assert body["allocation_requests"] == []
    reason = only_reason(body, "cn")
    assert (reason["group"], reason["filter"]) == ("_C,_N", "same_subtree")
    body = explain(cloud, **query, required_N="CUSTOM_PHYSNET1", same_subtree="_C,_N")
    assert trees(body) == (1, 1, 0)


def test_combination_when_groups_share_a_provider(client):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU=4)
    cloud.consume({"cn": {"VCPU": 1}})
    body = explain(cloud, resources1="VCPU:2", resources2="VCPU:2", group_policy="none")
    reason = only_reason(body, "cn")
    assert (reason["filter"], reason["resource_class"], reason["requested"],
            reason["free"]) == ("combination", "VCPU", 4, 3)


def test_combination_before_1_29(client):
    # Before 1.29 one provider per tree gives resources: the child's VCPU and
    # the root's memory cannot be combined.
    cloud = Cloud(client)
    cloud.provider("cn", MEMORY_MB=4096)
    cloud.provider("numa", parent="cn", VCPU=4)
    body = explain(cloud, version="1.28", resources="VCPU:1,MEMORY_MB:1")
    assert body["allocation_requests"] == []
    assert only_reason(body, "cn")["filter"] == "combination"
    assert trees(explain(cloud, resources="VCPU:1,MEMORY_MB:1")) == (1, 1, 0)


def test_limit(client):
    cloud = Cloud(client)
    for i in range(3):
        cloud.provider(f"cn{i}", VCPU=8)
    body = explain(cloud, resources="VCPU:1", limit="1")
    assert len(body["allocation_requests"]) == 1
    assert trees(body) == (3, 1, 2)
    assert counted(body) == {("*", "limit", None): 2}
    assert "limit=1" in only_reason(body, "cn1")["detail"]


def test_sharing_provider_supplies_a_class(client):
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, aggregates=["a"])
    cloud.provider("cn2", VCPU=8, aggregates=["b"])
    cloud.provider("ss", DISK_GB=1000, traits=[SHARES], aggregates=["a"])
    body = explain(cloud, resources="VCPU:1,DISK_GB:100")
    # cn1 gets its disk from ss; ss is in the answer too; cn2 has no disk at all.
    assert trees(body) == (3, 2, 1)
    reason = only_reason(body, "cn2")
    assert (reason["filter"], reason["resource_class"]) == ("no_inventory", "DISK_GB")
    cloud.consume({"ss": {"DISK_GB": 950}})
    body = explain(cloud, resources="VCPU:1,DISK_GB:100")
    assert trees(body) == (3, 0, 3)
    reason = only_reason(body, "cn1")
    assert (reason["filter"], reason["provider_uuid"], reason["free"]) == (
        "capacity", cloud.uuid("ss"), 50)


def test_nested_tree_reasons_name_the_providers(client):
    cloud = Cloud(client)
    cloud.provider("cn", MEMORY_MB=4096)
    cloud.provider("numa0", parent="cn", VCPU=4)
    cloud.provider("numa1", parent="cn", VCPU=2)
    body = explain(cloud, resources="VCPU:6,MEMORY_MB:1")
    reasons = excluded(body)["cn"]
    assert {(r["filter"], r["provider_uuid"], r["free"]) for r in reasons} == {
        ("capacity", cloud.uuid("numa0"), 4), ("capacity", cloud.uuid("numa1"), 2)}
    assert counted(body) == {("", "capacity", "VCPU"): 1}


# --- counts, the sample, steps -------------------------------------------------

def test_counts_cover_every_tree_and_explain_limit_bounds_the_sample(client):
    cloud = Cloud(client)
    for i in range(5):
        cloud.provider(f"cn{i}", VCPU=2, traits=["CUSTOM_GOLD"] if i % 2 else [])
    cloud.provider("big", VCPU=16)
    query = {"resources": "VCPU:4", "required": "CUSTOM_GOLD"}
    body = explain(cloud, **query, explain_limit="2")
    assert trees(body) == (6, 0, 6)
    assert counted(body) == {("", "capacity", "VCPU"): 5, ("", "required_trait", None): 4}
    assert [t["root_provider_name"] for t in body["explanation"]["excluded"]] == ["cn0", "cn1"]
    assert len(explain(cloud, **query)["explanation"]["excluded"]) == 6
    assert len(explain(cloud, **query, explain_limit="1")["explanation"]["excluded"]) == 1


def test_steps_count_providers_and_are_logged(client, caplog):
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, traits=["HW_CPU_X86_AVX2"])
    cloud.provider("cn2", VCPU=2, traits=["HW_CPU_X86_AVX2"])
    cloud.provider("cn3", VCPU=8)
    cloud.provider("mem", MEMORY_MB=1024)
    with caplog.at_level(logging.DEBUG, logger="allotment.candidates.explain"):
        body = explain(cloud, resources="VCPU:4", required="HW_CPU_X86_AVX2")
    steps = [(s["group"], s["filter"], s["providers"]) for s in body["explanation"]["steps"]]
    assert steps == [("", "inventory:VCPU", 3), ("", "resources:VCPU", 2),
                     ("", "required_trait", 1)]
    assert body["explanation"]["steps"][1]["detail"] == "found 2 providers with available 4 VCPU"
    logged = [r.getMessage() for r in caplog.records if r.name == "allotment.candidates.explain"]
    for step in body["explanation"]["steps"]:
        assert sum(step["detail"] in line for line in logged) == 1


# --- the judging agrees with the engine ------------------------------------------

@pytest.fixture
def mixed(client):
    """Flat hosts, a nested host, sharing storage, traits, aggregates and usage."""
    cloud = Cloud(client)
    cloud.provider("flat1", VCPU=8, MEMORY_MB=4096, aggregates=["a"], traits=["CUSTOM_GOLD"])
    cloud.provider("flat2", VCPU=4, MEMORY_MB=1024, DISK_GB=100, aggregates=["b"])
    cloud.provider("cn", MEMORY_MB=8192, aggregates=["a"], traits=["COMPUTE_VOLUME_MULTI_ATTACH"])
    cloud.provider("numa0", parent="cn", VCPU=4, traits=["HW_NUMA_ROOT"])
    cloud.provider("numa1", parent="cn", VCPU={"total": 8, "step_size": 2})
    cloud.provider("pf0", parent="numa0", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET1"])
    cloud.provider("pf1", parent="numa1", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET2"])
    cloud.provider("ss", DISK_GB=1000, traits=[SHARES, "CUSTOM_SSD"], aggregates=["a"])
    cloud.consume({"flat1": {"VCPU": 6}, "numa0": {"VCPU": 1}, "ss": {"DISK_GB": 500}})
    return cloud


AGREEMENT_QUERIES = [
    ("1.39", {"resources": "VCPU:2"}),
    ("1.39", {"resources": "VCPU:2,MEMORY_MB:512,DISK_GB:100"}),
    ("1.39", {"resources": "VCPU:3,DISK_GB:600"}),
    ("1.39", {"resources": "VCPU:1", "required": "CUSTOM_GOLD"}),
    ("1.39", {"resources": "VCPU:1,DISK_GB:10", "required": "CUSTOM_SSD"}),
    ("1.39", {"resources": "VCPU:1", "required": "!HW_NUMA_ROOT"}),
    ("1.39", {"resources": "VCPU:1", "member_of": "{a}"}),
    ("1.39", {"resources": "VCPU:1,DISK_GB:10", "member_of": "!{b}"}),
    ("1.39", {"resources": "VCPU:3", "in_tree": "{cn}"}),
    ("1.39", {"resources": "VCPU:1", "root_required": "COMPUTE_VOLUME_MULTI_ATTACH"}),
    ("1.39", {"resources1": "VCPU:1", "resources2": "SRIOV_NET_VF:2",
              "required2": "CUSTOM_PHYSNET2", "group_policy": "isolate"}),
    ("1.39", {"resources1": "VCPU:2", "resources2": "VCPU:2", "group_policy": "isolate"}),
    ("1.39", {"resources_C": "VCPU:1", "resources_N": "SRIOV_NET_VF:1",
              "required_N": "CUSTOM_PHYSNET1", "same_subtree": "_C,_N",
              "group_policy": "none"}),
    ("1.39", {"resources": "MEMORY_MB:1", "resources_N": "SRIOV_NET_VF:1",
              "required_T": "HW_NUMA_ROOT", "same_subtree": "_N,_T",
              "group_policy": "none"}),
    ("1.28", {"resources": "VCPU:1,MEMORY_MB:1"}),
    ("1.39", {"resources": "VCPU:1,MEMORY_MB:1", "limit": "1"}),
]


def _explained_in_process(database, params: dict, minor: int, sample_limit: int):
    """Explain on ``params`` at 1.``minor``, in process: the candidates the traced
    search found, those the plain search finds, and the explanation."""
    from allotment.candidates import engine
    from allotment.candidates import explain as diagnosis
    from allotment.candidates.model import load
    from allotment.candidates.request import Settings
    from allotment.candidates.sources import ModelSource
    from allotment.candidates.trace import Trace
    from allotment.http.candidates_query import parse_request
    from allotment.http.microversion import Version
    from allotment.http.request import Query

    request = parse_request(Query(path_for("", params)[1:]), Version(1, minor))
    with database.db.snapshot() as conn:
        state = load(conn)
    trace = Trace()
    traced = engine.find(ModelSource(state), request, Settings(), trace=trace)
    plain = engine.find(ModelSource(state), request, Settings())
    found = diagnosis.explain(state, request, traced, trace, Settings(),
                              sample_limit=sample_limit)
    return traced, plain, found


def _same_candidates(one, other) -> None:
    assert [c.key() for c in one.candidates] == [c.key() for c in other.candidates]


@pytest.mark.parametrize("version, template", AGREEMENT_QUERIES)
def test_every_tree_out_of_the_answer_has_a_reason(mixed, database, version, template):
    """The traced search answers as the plain one; every tree out of it has a reason."""

    values = {"a": mixed.aggregate("a"), "b": mixed.aggregate("b"), "cn": mixed.uuid("cn")}
    params = {key: value.format(**values) for key, value in template.items()}
    traced, plain, found = _explained_in_process(database, params,
                                                 int(version.split(".")[1]), 1000)
    _same_candidates(traced, plain)
    assert all(reasons for _, _, reasons in found.excluded)
    body = found.as_dict()
    check_contract(body)
    assert body["trees"]["total"] == 4
    assert len(body["excluded"]) == body["trees"]["excluded"]
    # The HTTP answer says the same.
    http = explain(mixed, version=version, **params, explain_limit="1000")
    assert http["explanation"]["trees"] == body["trees"]


# --- the candidates part, the HTTP rules ---------------------------------------

@pytest.mark.parametrize("version, query", [
    ("1.10", {"resources": "VCPU:1,DISK_GB:10"}),
    ("1.28", {"resources": "VCPU:1,DISK_GB:10"}),
    ("1.29", {"resources": "VCPU:1", "resources1": "SRIOV_NET_VF:1", "group_policy": "none"}),
    ("1.39", {"resources": "VCPU:1,DISK_GB:10", "limit": "2",
              "required": "in:HW_CPU_X86_AVX2,HW_CPU_X86_SSE"}),
    ("1.39", {"resources": "MEMORY_MB:64", "resources_N": "SRIOV_NET_VF:1",
              "group_policy": "isolate", "root_required": "!CUSTOM_GOLD"}),
])
def test_candidates_equal_allocation_candidates(client, version, query):
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, MEMORY_MB=2048, aggregates=["a"], traits=["HW_CPU_X86_SSE"])
    cloud.provider("pf", parent="cn1", SRIOV_NET_VF=4)
    cloud.provider("cn2", VCPU=8, MEMORY_MB=2048, DISK_GB=100, traits=["CUSTOM_GOLD"])
    cloud.provider("ss", DISK_GB=1000, traits=[SHARES], aggregates=["a"])
    expected = client.get(path_for("/allocation_candidates", query), version=version)
    got = client.get(path_for(PATH, {**query, "explain_limit": "3"}), version=version)
    assert expected.status == got.status == 200
    body = got.json()
    check_contract(body.pop("explanation"))
    assert body == expected.json()
    assert got.headers.get("cache-control") == expected.headers.get("cache-control")


@pytest.mark.parametrize("query, status", [
    ("resources=VCPU:100&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", 200),
    ("resources=VCPU:100&resources1=CUSTOM_NOT_THERE:1", 200),
    (f"resources=VCPU:1&in_tree={uuidlib.UUID(int=7)}&resources1=VCPU:1"
     "&required1=CUSTOM_NOT_THERE", 200),
    ("resources1=VCPU:1&required1=CUSTOM_NOT_THERE&resources=VCPU:100", 400),
    ("resources=VCPU:1&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", 400),
])
def test_unknown_names_as_allocation_candidates(client, query, status):
    """An unknown name after a group that finds nothing: no candidates, as
    GET /allocation_candidates (and upstream) answers; every tree is out."""
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8)
    cloud.provider("cn2", VCPU=8)
    expected = client.get(f"/allocation_candidates?{query}", version="1.39")
    got = client.get(f"{PATH}?{query}&explain_limit=5", version="1.39")
    assert expected.status == got.status == status, (expected, got)
    if status == 400:
        assert got.detail == expected.detail
        return
    body = got.json()
    explanation = body.pop("explanation")
    check_contract(explanation)
    assert body == expected.json() == {"allocation_requests": [], "provider_summaries": {}}
    assert explanation["trees"] == {"total": 2, "qualified": 0, "excluded": 2}
    reasons = {(r["group"], r["filter"]) for r in explanation["reasons"]}
    assert ("1", "unknown_name") in reasons
    detail = next(r["detail"] for tree in explanation["excluded"] for r in tree["reasons"]
                  if r["filter"] == "unknown_name")
    assert "CUSTOM_NOT_THERE" in detail


@pytest.mark.parametrize("value", ["0", "1001", "-1", "x", "1.5", "", "99999"])
def test_bad_explain_limit(client, value):
    resp = client.get(f"{PATH}?resources=VCPU:1&explain_limit={value}", version="1.39")
    assert resp.status == 400, resp
    assert "explain_limit" in resp.detail
    assert resp.error_code == BAD_VALUE


def test_repeated_explain_limit(client):
    resp = client.get(f"{PATH}?resources=VCPU:1&explain_limit=2&explain_limit=3",
                      version="1.39")
    assert resp.status == 400
    assert resp.error_code == "placement.query.duplicate_key"


@pytest.mark.parametrize("query, version", [
    ("", "1.10"),
    ("resources=VCPU:x", "1.10"),
    ("resources=MCPU:1", "1.10"),
    ("resources=VCPU:1&limit=0", "1.16"),
    ("resources=VCPU:1&required=CUSTOM_NOPE", "1.17"),
    ("resources1=VCPU:1&resources2=VCPU:1", "1.25"),
    ("resources=VCPU:1&bogus=1", "1.39"),
    ("resources=VCPU:1&root_required=HW_CPU_X86_SSE&root_required=!HW_CPU_X86_SSE2", "1.35"),
])
def test_bad_queries_as_allocation_candidates(client, query, version):
    expected = client.get(f"/allocation_candidates?{query}", version=version)
    got = client.get(f"{PATH}?{query}&explain_limit=5", version=version)
    assert expected.status == got.status == 400, (expected, got)
    assert got.detail == expected.detail
    assert got.error_code == expected.error_code


def test_hidden_before_1_10(client):
    assert client.get(f"{PATH}?resources=VCPU:1", version="1.9").status == 404
    assert client.get(f"{PATH}?resources=VCPU:1&explain_limit=0", version="1.9").status == 404


def test_not_allowed_for_a_reader(client):
    for path in ("/allocation_candidates", PATH):
        resp = client.get(f"{path}?resources=VCPU:1", version="1.10", token="user")
        assert resp.status == 403, path


# --- a cloud of 1,000 hosts ------------------------------------------------------

def load_hosts(engine: sa.Engine, hosts: list[dict]) -> None:
    """Flat hosts straight into the tables (the API would take minutes for 1,000).

    Each host: ``name``, ``inventory`` {class: total}, ``used`` {class: amount},
    ``traits`` [names].
    """
    rp = t.resource_providers
    with engine.begin() as conn:
        conn.execute(rp.insert(), [{"uuid": str(uuidlib.uuid4()), "name": h["name"],
                                    "generation": 1} for h in hosts])
        conn.execute(rp.update().where(rp.c.root_provider_id.is_(None))
                     .values(root_provider_id=rp.c.id))
        ids = dict(conn.execute(sa.select(rp.c.name, rp.c.id)).all())
        names = {n for h in hosts for n in h.get("traits", ())}
        trait_ids = dict(conn.execute(sa.select(t.traits.c.name, t.traits.c.id)
                                      .where(t.traits.c.name.in_(names))).all()) if names else {}
        inventories = [{"resource_provider_id": ids[h["name"]],
                        "resource_class_id": STANDARD_CLASS_IDS[rc], "total": total,
                        "reserved": 0, "min_unit": 1, "max_unit": total, "step_size": 1,
                        "allocation_ratio": 1.0}
                       for h in hosts for rc, total in h["inventory"].items()]
        conn.execute(t.inventories.insert(), inventories)
        allocations = [{"resource_provider_id": ids[h["name"]], "consumer_id": str(uuidlib.uuid4()),
                        "resource_class_id": STANDARD_CLASS_IDS[rc], "used": used}
                       for h in hosts for rc, used in h.get("used", {}).items()]
        if allocations:
            conn.execute(t.allocations.insert(), allocations)
        traits = [{"resource_provider_id": ids[h["name"]], "trait_id": trait_ids[n]}
                  for h in hosts for n in h.get("traits", ())]
        if traits:
            conn.execute(t.resource_provider_traits.insert(), traits)


def thousand_hosts(count: int = 1000, seed: int = 17) -> list[dict]:
    """Hosts of 16 to 64 VCPU; a third have AVX-512, and those are all busy."""
    rng = random.Random(seed)
    hosts = []
    for i in range(count):
        vcpu = rng.choice((16, 32, 64))
        memory = vcpu * 4096
        avx512 = i % 3 == 0
        free_vcpu = rng.randint(0, 6) if avx512 else rng.randint(0, vcpu // 2)
        hosts.append({
            "name": f"cn-{i:04d}",
            "inventory": {"VCPU": vcpu, "MEMORY_MB": memory, "DISK_GB": 1000},
            "used": {"VCPU": vcpu - free_vcpu,
                     "MEMORY_MB": memory - rng.choice((2048, 8192, 32768, 65536)),
                     "DISK_GB": rng.randint(0, 900)},
            "traits": ["HW_CPU_X86_AVX512F"] if avx512 else [],
        })
    return hosts


def test_a_thousand_hosts_and_nothing_fits(client, database):
    load_hosts(database.engine, thousand_hosts())
    query = {"resources": "VCPU:8,MEMORY_MB:16384,DISK_GB:200",
             "required": "HW_CPU_X86_AVX512F"}
    started = time.perf_counter()
    body = explain(Cloud(client), **query)
    elapsed = time.perf_counter() - started
    assert body["allocation_requests"] == []
    explanation = body["explanation"]
    assert trees(body) == (1000, 0, 1000)
    assert len(explanation["excluded"]) == 10
    reasons = counted(body)
    assert reasons[("", "required_trait", None)] == 666
    assert 334 < reasons[("", "capacity", "VCPU")] < 1000
    # Every tree is out for a reason, and no reason counts a tree twice.
    assert all(0 < n <= 1000 for n in reasons.values())
    with open("/tmp/explain_1000.json", "w") as out:
        json.dump({"backend": database.backend, "seconds": round(elapsed, 3),
                   "query": query, "explanation": explanation}, out, indent=2)
    print(json.dumps(explanation, indent=2)[:4000])


def test_explain_judges_the_state_that_answered(client, database):
    """Changed behind the read model between requests, the cloud explain judges is
    the one the candidates came from: the same candidates as the served ones, and
    the changed host excluded for what changed."""
    cloud = Cloud(client)
    for i in range(4):
        cloud.provider(f"cn{i}", VCPU=4, MEMORY_MB=1024)
    query = {"resources": "VCPU:2,MEMORY_MB:256"}
    assert client.get(path_for("/allocation_candidates", query), version="1.39").status == 200
    inventories = t.inventories

    def provider_id(name: str) -> int:
        with database.engine.connect() as conn:
            return conn.execute(sa.select(t.resource_providers.c.id).where(
                t.resource_providers.c.uuid == cloud.uuid(name))).scalar_one()

    def set_total(name: str, total: int) -> None:
        with database.engine.begin() as conn:
            conn.execute(inventories.update().where(
                inventories.c.resource_provider_id == provider_id(name),
                inventories.c.resource_class_id == STANDARD_CLASS_IDS["VCPU"]
            ).values(total=total, max_unit=total))

    def delete_memory(name: str) -> None:
        with database.engine.begin() as conn:
            conn.execute(inventories.delete().where(
                inventories.c.resource_provider_id == provider_id(name),
                inventories.c.resource_class_id == STANDARD_CLASS_IDS["MEMORY_MB"]))

    for change, name, expected_filters in [
            (lambda: set_total("cn0", 1), "cn0", {"capacity", "max_unit"}),
            (lambda: delete_memory("cn2"), "cn2", {"no_inventory"}),
            (lambda: set_total("cn0", 8), None, set())]:
        change()
        body = explain(cloud, **query, explain_limit="10")
        served = client.get(path_for("/allocation_candidates", query), version="1.39").json()
        assert {key: body[key] for key in served} == served
        answered = {cloud.name_of(rp) for request in served["allocation_requests"]
                    for rp in request["allocations"]}
        out = excluded(body)
        assert body["explanation"]["trees"]["qualified"] == len(answered)
        assert set(out) == {f"cn{i}" for i in range(4)} - answered
        if name is not None:
            assert name in out
            assert {reason["filter"] for reason in out[name]} == expected_filters


def test_same_subtree_with_a_sharing_provider_among_the_options(client):
    """A granular group a sharing provider of another tree can serve, under
    same_subtree: the sharing provider's own tree is walked for its ancestry."""
    cloud = Cloud(client)
    cloud.provider("cn", aggregates=["a"])
    cloud.provider("numa", parent="cn", VCPU=4)
    cloud.provider("ss", DISK_GB=100, traits=[SHARES], aggregates=["a"])
    body = explain(cloud, version="1.36", resources_C="VCPU:1", resources_D="DISK_GB:1",
                   same_subtree="_C,_D", group_policy="none", explain_limit="10")
    assert body["allocation_requests"] == []
    reasons = {(r["group"], r["filter"]) for r in excluded(body)["cn"]}
    assert ("_C,_D", "same_subtree") in reasons


@pytest.fixture
def gold_and_sharing(client):
    """root_required=CUSTOM_GOLD that no sharing provider's root has: ``ss`` is
    its own root, ``ss3`` hangs under ``host3``, which is in aggregate m
    while ``ss3`` itself is only in a."""
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, traits=["CUSTOM_GOLD"], aggregates=["a", "m"])
    cloud.provider("cn2", VCPU=8, aggregates=["a"])
    cloud.provider("ss", DISK_GB=1000, traits=[SHARES], aggregates=["a"])
    cloud.provider("host3", aggregates=["m"])
    cloud.provider("ss3", parent="host3", DISK_GB=1000, traits=[SHARES], aggregates=["a"])
    return cloud


# (query, trees a sharing-only offer serves, providers root_required lets through
# per group): with member_of only ss3's root is in m, and ss3 itself is not, so
# the engine does not let it serve cn1, nor count it past root_required.
ROOT_REQUIRED_SHARING = [
    ({"resources": "VCPU:1,DISK_GB:10"}, set(), {"": 3}),
    ({"resources": "VCPU:1,DISK_GB:10", "member_of": "{a}"}, set(), {"": 3}),
    ({"resources": "VCPU:1,DISK_GB:10", "member_of": "{m}"}, set(), {"": 1}),
    ({"resources": "VCPU:1", "resources1": "DISK_GB:10", "group_policy": "none"},
     set(), {"": 1, "1": 2}),
    ({"resources": "VCPU:1", "resources1": "DISK_GB:10", "member_of1": "{a}",
      "group_policy": "none"}, set(), {"": 1, "1": 2}),
    ({"resources": "VCPU:1", "resources1": "DISK_GB:10", "member_of1": "{m}",
      "group_policy": "none"}, set(), {"": 1, "1": 0}),
    ({"resources": "DISK_GB:10"}, {"cn1"}, {"": 2}),
    ({"resources": "DISK_GB:10", "member_of": "{m}"}, set(), {"": 0}),
]


@pytest.mark.parametrize("template, offered_to, root_steps", ROOT_REQUIRED_SHARING)
def test_root_required_and_sharing_providers_agree(gold_and_sharing, database, template,
                                                   offered_to, root_steps):
    """A sharing provider whose root lacks a root_required trait serves other
    trees; for the unsuffixed group with member_of only when it is itself a
    member. Explain excludes exactly the trees the served answer leaves out
    and counts past root_required the providers the engine lets through."""

    cloud = gold_and_sharing
    values = {"a": cloud.aggregate("a"), "m": cloud.aggregate("m")}
    params = {key: value.format(**values) for key, value in template.items()}
    params["root_required"] = "CUSTOM_GOLD"
    served = cloud.client.get(path_for("/allocation_candidates", params), version="1.39")
    assert served.status == 200
    summaries = served.json()["provider_summaries"]
    served_roots = {cloud.name_of(summaries[rp]["root_provider_uuid"])
                    for request in served.json()["allocation_requests"]
                    for rp in request["allocations"]}
    body = explain(cloud, **params, explain_limit="100")
    assert set(excluded(body)) == {"cn1", "cn2", "ss", "host3"} - served_roots - offered_to
    steps = {s["group"]: s["providers"] for s in body["explanation"]["steps"]
             if s["filter"] == "root_required"}
    assert steps == root_steps
    traced, plain, _ = _explained_in_process(database, params, 39, 100)
    _same_candidates(traced, plain)


@pytest.mark.parametrize("version, template", AGREEMENT_QUERIES)
def test_a_groups_rules_refuse_exactly_the_providers_they_keep_out(mixed, database, version,
                                                                   template):
    """What the match keeps (``passes``) and what explain is told (``why_not``) are
    one rule: a provider is refused, at home or in another tree, exactly when it
    does not serve there."""
    from allotment.candidates import rules
    from allotment.candidates.model import load
    from allotment.candidates.resolved import Roots, group_ids
    from allotment.candidates.sources import ModelSource
    from allotment.http.candidates_query import parse_request
    from allotment.http.microversion import Version
    from allotment.http.request import Query

    values = {"a": mixed.aggregate("a"), "b": mixed.aggregate("b"), "cn": mixed.uuid("cn")}
    params = {key: value.format(**values) for key, value in template.items()}
    request = parse_request(Query(path_for("", params)[1:]),
                            Version(1, int(version.split(".")[1])))
    with database.db.snapshot() as conn:
        state = load(conn)
    names = ModelSource(state).resolve(request)
    roots = Roots(required=tuple(names.traits[n] for n in request.root_required),
                  forbidden=tuple(names.traits[n] for n in request.root_forbidden))
    for group in request.groups:
        group_rules = rules.group_rules(group_ids(group, names), state, names.sharing_trait,
                                        roots)
        for provider in state.providers.values():
            anywhere = group_rules.serves_anywhere(provider)
            assert (not group_rules.why_not(provider, home=True)) == (
                anywhere and group_rules.serves_home(provider)), (group, provider.name)
            if group_rules.shares is not None:
                assert (not group_rules.why_not(provider, home=False)) == (
                    anywhere and group_rules.serves_others(provider)), (group, provider.name)
