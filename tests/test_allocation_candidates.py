"""GET /allocation_candidates: parameters, version gates, errors and response shapes."""

import pytest

from tests.support.candidates_cloud import Cloud

AGG = "8ac4a5fb-e0dd-4d3c-8bcc-5e2ae7d0e2a1"
UUID = "5ba4bd2b-8c33-4e0a-9f8a-5e4c9f1c2f34"
BAD_VALUE = "placement.query.bad_value"


@pytest.fixture
def cloud(client):
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, MEMORY_MB=2048, traits=["HW_CPU_X86_SSE"],
                   aggregates=["a"])
    cloud.provider("numa", parent="cn1", VCPU={"total": 4, "reserved": 1})
    return cloud


def get(client, query, version="1.39"):
    return client.get(f"/allocation_candidates?{query}", version=version)


def refused(client, query, version, *messages, code=None, status=400):
    resp = get(client, query, version)
    assert resp.status == status, resp
    for message in messages:
        assert message in resp.detail, resp.detail
    if code is not None:
        assert resp.error_code == code
    return resp


def test_hidden_before_1_10(client):
    assert get(client, "resources=VCPU:1", "1.9").status == 404


@pytest.mark.parametrize("query, version, messages", [
    ("", "1.10", ["'resources' is a required property"]),
    ("resources=", "1.10", ["Badly formed resources parameter. Expected resources query "
                            "string parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. "
                            "Got: empty string."]),
    ("resources=VCPU", "1.10", ["Got: VCPU."]),
    ("resources=VCPU:x", "1.10", ["Requested resource VCPU expected positive integer amount. "
                                  "Got: x."]),
    ("resources=VCPU:0", "1.10", ["Requested resource VCPU requires amount >= 1. Got: 0."]),
    ("resources=MCPU:1", "1.10", ["Invalid resource class in resources parameter: "
                                  "No such resource class MCPU."]),
    ("resources=VCPU:1&limit=2", "1.15", ["Invalid query string parameters",
                                          "'limit' was unexpected"]),
    ("resources=VCPU:1&limit=cow", "1.16", ["Failed validating 'pattern'"]),
    ("resources=VCPU:1&limit=0", "1.16", ["Failed validating 'pattern'"]),
    ("resources=VCPU:1&limit=-1", "1.16", ["Failed validating 'pattern'"]),
    ("resources=VCPU:1&required=HW_CPU_X86_SSE", "1.16", ["'required' was unexpected"]),
    ("resources=VCPU:1&required=CUSTOM_NOPE", "1.17", ["No such trait(s): CUSTOM_NOPE."]),
    ("resources=VCPU:1&required=", "1.17", [
        "Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. "
        "Got an empty trait in: "]),
    ("resources=VCPU:1&required=", "1.22", [
        "Expected 'required' parameter value of the form: HW_CPU_X86_VMX,!CUSTOM_MAGIC."]),
    ("resources=VCPU:1&required=!HW_CPU_X86_SSE", "1.21", [
        "Expected 'required' parameter value of the form: HW_CPU_X86_VMX,CUSTOM_MAGIC. "
        "Got: !HW_CPU_X86_SSE"]),
    ("resources=VCPU:1&required=HW_CPU_X86_SSE,!HW_CPU_X86_SSE", "1.22", [
        "Conflicting required and forbidden traits found in the following traits keys: "
        "required: (HW_CPU_X86_SSE)"]),
    ("resources=VCPU:1&required=in:HW_CPU_X86_SSE", "1.38", [
        "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion "
        "1.39. Got: in:HW_CPU_X86_SSE"]),
    ("resources=VCPU:1&required=in:HW_CPU_X86_SSE,!HW_CPU_X86_SSE2", "1.39", [
        "does not support forbidden traits"]),
    ("resources=VCPU:1&member_of=" + AGG, "1.20", ["'member_of' was unexpected"]),
    ("resources=VCPU:1&member_of=nope", "1.21", [
        "Expected 'member_of' parameter to contain valid UUID(s). Got: nope"]),
    (f"resources=VCPU:1&member_of={AGG},{UUID}", "1.21", [
        "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword"]),
    (f"resources=VCPU:1&member_of={AGG}&member_of={UUID}", "1.23", [
        "Multiple member_of parameters are not supported"]),
    (f"resources=VCPU:1&member_of=!{AGG}", "1.31", [
        "Forbidden member_of parameters are not supported in the specified microversion"]),
    ("resources=VCPU:1&resources1=VCPU:1", "1.24", ["'resources1' was unexpected"]),
    ("resources=VCPU:1&group_policy=none", "1.24", ["'group_policy' was unexpected"]),
    ("resources01=VCPU:1", "1.25", ["'resources01' does not match any of the regexes"]),
    ("resources_A=VCPU:1", "1.32", ["'resources_A' does not match any of the regexes"]),
    ("resources_" + "A" * 65 + "=VCPU:1", "1.33", ["does not match any of the regexes"]),
    ("resources=VCPU:1&group_policy=bogus", "1.25", ["'bogus' is not one of ['none', "
                                                     "'isolate']"]),
    ("resources1=VCPU:1&resources2=VCPU:1", "1.25", [
        'The "group_policy" parameter is required when specifying more than one '
        '"resources{N}" parameter.']),
    ("required=HW_CPU_X86_SSE&required1=HW_CPU_X86_SSE2", "1.25", [
        "All traits parameters must be associated with resources.  Found the following "
        "orphaned traits keys: required, required1"]),
    (f"member_of={AGG}&member_of3={AGG}", "1.25", [
        "All member_of parameters must be associated with resources. Found the following "
        "orphaned member_of keys: member_of, member_of3"]),
    ("resources=VCPU:1&required1=!HW_CPU_X86_SSE", "1.25", [
        "All request groups must specify resources."]),
    ("group_policy=isolate", "1.25", [
        "At least one request group (`resources` or `resources{$S}`) is required."]),
    ("resources=VCPU:1&in_tree=" + UUID, "1.30", ["'in_tree' does not match any of the regexes"]),
    ("resources=VCPU:1&in_tree=life-is-beautiful", "1.31", [
        "Expected 'in_tree' parameter to be a format of uuid. Got: life-is-beautiful"]),
    ("resources=VCPU:1&root_required=HW_CPU_X86_SSE", "1.34", [
        "'root_required' does not match any of the regexes"]),
    ("resources=VCPU:1&root_required=CUSTOM_NOPE", "1.35", ["No such trait(s): CUSTOM_NOPE."]),
    ("resources=VCPU:1&root_required=in:HW_CPU_X86_SSE", "1.39", [
        "only supported since microversion 1.39"]),
    ("resources=VCPU:1&same_subtree=_A", "1.35", [
        "'same_subtree' does not match any of the regexes"]),
])
def test_bad_queries(client, query, version, messages):
    client.create_provider("cn")
    refused(client, query, version, *messages)


@pytest.mark.parametrize("query, messages, code", [
    ("resources=VCPU:1&root_required=HW_CPU_X86_SSE&root_required=!HW_CPU_X86_SSE2",
     ["Query parameter 'root_required' may be specified only once."],
     "placement.query.duplicate_key"),
    ("resources=VCPU:1&root_required=HW_CPU_X86_SSE,HW_CPU_X86_SSE2,!HW_CPU_X86_SSE",
     ["Conflicting required and forbidden traits found in root_required: HW_CPU_X86_SSE"],
     BAD_VALUE),
    ("resources_A=VCPU:1&same_subtree=_A,,_B",
     ["Empty string (unsuffixed group) can not be specified in `same_subtree` "], BAD_VALUE),
    ("resources_A=VCPU:1&required_B=HW_CPU_X86_SSE&group_policy=none",
     ["Resourceless suffixed group request should be specified in `same_subtree` query "
      "param: bad group(s) - ['_B']."], BAD_VALUE),
    ("resources_A=VCPU:1&resources_B=VCPU:1&same_subtree=_A,B&group_policy=none",
     ["Real suffixes should be specified in `same_subtree`: ['B'] not found in "
      "['_A', '_B']."], BAD_VALUE),
    ("required_A=HW_CPU_X86_SSE&same_subtree=_A",
     ["There must be at least one resources or resources[$S] parameter."],
     "placement.query.missing_value"),
    ("group_policy=none",
     ["There must be at least one resources or resources[$S] parameter."],
     "placement.query.missing_value"),
])
def test_bad_queries_with_codes(client, query, messages, code):
    refused(client, query, "1.39", *messages, code=code)


def test_first_limit_and_group_policy_count(cloud):
    resp = cloud.candidates(version="1.25", resources="VCPU:1", limit=["10", "1"])
    assert len(resp.json()["allocation_requests"]) == 2
    resp = cloud.candidates(version="1.29", resources1="VCPU:1", resources2="MEMORY_MB:1",
                            group_policy=["isolate", "none"])
    # isolate counts: VCPU and MEMORY_MB would need two providers of cn1's tree.
    assert [cloud.named(resp.json())] == [[{"numa": {"VCPU": 1}, "cn1": {"MEMORY_MB": 1}}]]


def test_repeated_required_before_1_39_keeps_the_last(cloud):
    resp = cloud.candidates(version="1.38", resources="VCPU:1",
                            required=["CUSTOM_NOPE", "HW_CPU_X86_SSE"])
    assert resp.status == 200
    assert len(resp.json()["allocation_requests"]) == 1
    resp = cloud.candidates(version="1.39", resources="VCPU:1",
                            required=["CUSTOM_NOPE", "HW_CPU_X86_SSE"])
    assert resp.status == 400 and "No such trait(s): CUSTOM_NOPE." in resp.detail


def test_response_shape_by_version(cloud):
    cn1, numa = cloud.uuid("cn1"), cloud.uuid("numa")
    body = cloud.candidates(version="1.10", resources="MEMORY_MB:1").json()
    assert "cache-control" not in cloud.client.get(
        "/allocation_candidates?resources=VCPU:1", version="1.14").headers
    assert body == {
        "allocation_requests": [{"allocations": [
            {"resource_provider": {"uuid": cn1}, "resources": {"MEMORY_MB": 1}}]}],
        "provider_summaries": {cn1: {"resources": {"MEMORY_MB": {"capacity": 2048,
                                                                 "used": 0}}}},
    }
    # Before 1.29 a nested provider may serve alone, and only providers in
    # the answer are summarised.
    body = cloud.candidates(version="1.28", resources="VCPU:1").json()
    assert sorted(req["allocations"].keys() for req in body["allocation_requests"]) == \
        sorted([{cn1: 0}.keys(), {numa: 0}.keys()])
    assert set(body["provider_summaries"]) == {cn1, numa}
    body = cloud.candidates(version="1.28", resources="MEMORY_MB:1").json()
    assert set(body["provider_summaries"]) == {cn1}
    resp = cloud.client.get("/allocation_candidates?resources=VCPU:1", version="1.15")
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["last-modified"].endswith(" GMT")
    body = cloud.candidates(version="1.12", resources="MEMORY_MB:1").json()
    assert body["allocation_requests"] == [
        {"allocations": {cn1: {"resources": {"MEMORY_MB": 1}}}}]
    body = cloud.candidates(version="1.17", resources="VCPU:1").json()
    assert body["provider_summaries"][cn1]["traits"] == ["HW_CPU_X86_SSE"]
    body = cloud.candidates(version="1.26", resources="VCPU:1").json()
    assert body["provider_summaries"][cn1]["resources"] == {
        "VCPU": {"capacity": 8, "used": 0}}
    body = cloud.candidates(version="1.27", resources="VCPU:1").json()
    assert body["provider_summaries"][cn1]["resources"] == {
        "VCPU": {"capacity": 8, "used": 0}, "MEMORY_MB": {"capacity": 2048, "used": 0}}
    assert set(body["provider_summaries"][cn1]) == {"resources", "traits"}
    body = cloud.candidates(version="1.29", resources="VCPU:1").json()
    assert len(body["allocation_requests"]) == 2
    assert body["provider_summaries"][numa] == {
        "resources": {"VCPU": {"capacity": 3, "used": 0}}, "traits": [],
        "parent_provider_uuid": cn1, "root_provider_uuid": cn1}
    assert body["provider_summaries"][cn1]["parent_provider_uuid"] is None
    assert "mappings" not in body["allocation_requests"][0]
    body = cloud.candidates(version="1.34", resources="VCPU:1").json()
    assert sorted(req["mappings"][""][0] for req in body["allocation_requests"]) == \
        sorted([cn1, numa])


def test_unknown_in_tree_and_aggregates_give_nothing(cloud):
    for params in ({"in_tree": UUID}, {"member_of": AGG}, {"member_of": f"in:{AGG},{UUID}"}):
        resp = cloud.candidates(version="1.31", resources="VCPU:1", **params)
        assert resp.status == 200
        assert resp.json() == {"allocation_requests": [], "provider_summaries": {}}
    # An unknown forbidden aggregate forbids nothing.
    resp = cloud.candidates(version="1.32", resources="VCPU:1", member_of="!" + AGG)
    assert len(resp.json()["allocation_requests"]) == 2


def test_not_allowed_for_a_reader(cloud):
    resp = cloud.client.get("/allocation_candidates?resources=VCPU:1", version="1.10",
                            token="user")
    assert resp.status == 403


def test_only_json_is_offered(cloud):
    resp = cloud.client.get("/allocation_candidates?resources=VCPU:1", version="1.10",
                            headers={"Accept": "text/plain"})
    assert resp.status == 406


def test_summaries_carry_long_trait_lists_and_fractional_ratios(client):
    """Summaries are read as text aggregates: nothing may be cut or rounded."""
    import os_traits

    cloud = Cloud(client)
    # Far more than MySQL's default GROUP_CONCAT limit of 1024 bytes.
    many = sorted(t for t in os_traits.get_traits() if t.startswith("COMPUTE_"))[:120]
    cloud.provider("big", traits=[*many, "CUSTOM_ZED"],
                   VCPU={"total": 7, "reserved": 1, "allocation_ratio": 1.5},
                   CUSTOM_WIDGET={"total": 1000, "allocation_ratio": 0.333})
    cloud.consume({"big": {"VCPU": 2}})
    body = cloud.candidates(resources="VCPU:1").json()
    summary = body["provider_summaries"][cloud.uuid("big")]
    assert len(many) > 60 and len(summary["traits"]) == len(many) + 1
    assert set(summary["traits"]) == {*many, "CUSTOM_ZED"}
    # Standard traits (lower ids) before the custom one, as upstream lists them.
    assert summary["traits"][-1] == "CUSTOM_ZED"
    assert summary["resources"] == {"VCPU": {"capacity": 9, "used": 2},
                                    "CUSTOM_WIDGET": {"capacity": 333, "used": 0}}


# --- unknown names: upstream's order of evaluation ----------------------------

NOT_THERE = "No such trait(s): CUSTOM_NOT_THERE."


@pytest.mark.parametrize("query, version", [
    # The unsuffixed group (first in the query string) finds nothing: upstream
    # stops before it reads group 1's traits or classes.
    ("resources=VCPU:100&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", "1.39"),
    ("resources=VCPU:100&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", "1.25"),
    ("resources=VCPU:100&resources1=VCPU:1&required1=custom_lower", "1.39"),
    ("resources=VCPU:100&resources1=CUSTOM_NOT_THERE:1", "1.39"),
    (f"resources=VCPU:1&in_tree={UUID}&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", "1.39"),
    # A granular group that finds nothing stops the groups after it.
    ("resources=VCPU:1&resources1=VCPU:100&resources2=VCPU:1&required2=CUSTOM_NOT_THERE"
     "&group_policy=none", "1.25"),
    (f"resources=MEMORY_MB:1&resources1=VCPU:1&in_tree1={UUID}&resources2=VCPU:1"
     "&required2=CUSTOM_NOT_THERE&group_policy=none", "1.39"),
    # The unsuffixed group's traits come from the providers that give resources.
    ("resources=MEMORY_MB:1&required=HW_CPU_X86_SSE&resources1=VCPU:1"
     "&required1=CUSTOM_NOT_THERE", "1.28"),
    # Within a group, member_of comes before the traits.
    (f"resources=VCPU:1&member_of={AGG}&required=CUSTOM_NOT_THERE", "1.39"),
    # root_required comes before every group.
    ("resources=VCPU:1&root_required=!HW_CPU_X86_SSE&resources1=VCPU:1"
     "&required1=CUSTOM_NOT_THERE", "1.39"),
])
def test_nothing_found_before_an_unknown_name_is_no_candidates(tree, query, version):
    resp = get(tree.client, query, version)
    assert resp.status == 200, resp
    assert resp.json()["allocation_requests"] == []
    assert resp.json()["provider_summaries"] == {}


@pytest.mark.parametrize("query, version, message", [
    # The group with the unknown trait comes first in the query string.
    ("resources1=VCPU:1&required1=CUSTOM_NOT_THERE&resources=VCPU:100", "1.39", NOT_THERE),
    # The groups before it find something.
    ("resources=VCPU:1&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", "1.39", NOT_THERE),
    ("resources=VCPU:1&resources1=VCPU:1&resources2=VCPU:1&required2=CUSTOM_NOT_THERE"
     "&group_policy=none", "1.25", NOT_THERE),
    # Alone, the unsuffixed group spreads over the tree even before 1.29.
    ("resources=VCPU:8,MEMORY_MB:1&resources1=VCPU:1&required1=CUSTOM_NOT_THERE", "1.28",
     NOT_THERE),
    ("resources=VCPU:1&required=HW_CPU_X86_SSE&resources1=VCPU:1"
     "&required1=CUSTOM_NOT_THERE", "1.39", NOT_THERE),
    # Within a group, the traits come before in_tree.
    (f"resources=VCPU:1&required=CUSTOM_NOT_THERE&in_tree={UUID}", "1.39", NOT_THERE),
    (f"resources=VCPU:1&required=!CUSTOM_NOT_THERE&in_tree={UUID}", "1.39", NOT_THERE),
    # The group's classes come before anything else of it.
    (f"resources=VCPU:100,CUSTOM_NOT_THERE:1&member_of={AGG}", "1.39",
     "Invalid resource class in resources parameter: No such resource class "
     "CUSTOM_NOT_THERE."),
    # root_required's own traits come first of all.
    ("resources=VCPU:100&root_required=CUSTOM_NOT_THERE", "1.35", NOT_THERE),
    ("resources=VCPU:1&root_required=HW_CPU_X86_SSE&resources1=VCPU:1"
     "&required1=CUSTOM_NOT_THERE", "1.39", NOT_THERE),
])
def test_an_unknown_name_upstream_reaches_is_refused(tree, query, version, message):
    refused(tree.client, query, version, message)


@pytest.fixture
def tree(client):
    """One root with VCPU 8 and a trait, and a child with VCPU 4 and MEMORY_MB."""
    cloud = Cloud(client)
    cloud.provider("cn", VCPU=8, traits=["HW_CPU_X86_SSE"])
    cloud.provider("numa", parent="cn", VCPU=4, MEMORY_MB=1024)
    return cloud


def test_summaries_below_1_29_are_of_the_providers_in_the_answer(client):
    """The reference: before 1.29 provider_summaries is keyed by the providers in
    allocation_requests. Upstream also summarises the rest of the kept
    candidate's tree when ``limit`` cuts the answer (here the child); allotment
    follows the reference (doc/source/differences.md)."""
    cloud = Cloud(client)
    root = cloud.provider("root", VCPU=24)
    child = cloud.provider("child", parent="root", VCPU=7)
    body = cloud.candidates(version="1.20", resources="VCPU:4", limit="1").json()
    assert [list(req["allocations"]) for req in body["allocation_requests"]] == [[root]]
    assert set(body["provider_summaries"]) == {root}
    body = cloud.candidates(version="1.20", resources="VCPU:4").json()
    assert len(body["allocation_requests"]) == 2
    assert set(body["provider_summaries"]) == {root, child}
    # From 1.29 the whole tree of every provider in the answer.
    body = cloud.candidates(version="1.29", resources="VCPU:4", limit="1").json()
    assert len(body["allocation_requests"]) == 1
    assert set(body["provider_summaries"]) == {root, child}
