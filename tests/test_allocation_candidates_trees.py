"""GET /allocation_candidates over sharing providers, nested trees and capacity rules."""

import uuid
from dataclasses import replace

import pytest

from allotment.candidates import engine
from allotment.candidates.model import load
from allotment.candidates.request import CandidateRequest, RequestGroup, Settings
from allotment.candidates.sources import ModelSource
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.candidates_cloud import SHARES, Cloud, as_set
from tests.support.client import PlacementClient


@pytest.fixture
def client_with(database):
    """A client whose app runs with some ``[placement]`` options changed."""
    def make(**options) -> PlacementClient:
        conf = make_conf(database.url, **{f"placement__{k}": v for k, v in options.items()})
        return PlacementClient(make_app(conf, db=database.db, prepare=False))
    return make


@pytest.fixture
def shared(client):
    """Two compute nodes; cn1 has no disk; ss shares disk with both via aggregate a."""
    cloud = Cloud(client)
    cloud.provider("cn1", VCPU=8, MEMORY_MB=2048, aggregates=["a"])
    cloud.provider("cn2", VCPU=8, MEMORY_MB=2048, DISK_GB=500, aggregates=["a"],
                   traits=["HW_CPU_X86_AVX2"])
    cloud.provider("ss", DISK_GB=1000, traits=[SHARES, "CUSTOM_SSD"], aggregates=["a"])
    # Shares nothing: in no aggregate.
    cloud.provider("lonely", DISK_GB=1000, traits=[SHARES])
    return cloud


@pytest.fixture
def numa(client):
    """cn -> numa0 (HW_NUMA_ROOT) -> pf0 (PHYSNET1); cn -> numa1 -> pf1 (PHYSNET2)."""
    cloud = Cloud(client)
    cloud.provider("cn", MEMORY_MB=4096, DISK_GB=100, traits=["COMPUTE_VOLUME_MULTI_ATTACH"])
    cloud.provider("numa0", parent="cn", VCPU=4, traits=["HW_NUMA_ROOT"])
    cloud.provider("numa1", parent="cn", VCPU=4)
    cloud.provider("pf0", parent="numa0", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET1"])
    cloud.provider("pf1", parent="numa1", SRIOV_NET_VF=8, traits=["CUSTOM_PHYSNET2"])
    return cloud


def named(cloud, **params):
    resp = cloud.candidates(**params)
    assert resp.status == 200, resp
    return as_set(cloud.named(resp.json()))


def one(**allocations):
    return frozenset((name, frozenset(res.items())) for name, res in allocations.items())


def test_sharing_provider_serves_trees_in_its_aggregate(shared):
    query = {"resources": "VCPU:1,MEMORY_MB:1024,DISK_GB:100"}
    assert named(shared, **query) == {
        one(cn1={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
    }
    body = shared.candidates(**query).json()
    assert {shared.name_of(u) for u in body["provider_summaries"]} == {"cn1", "cn2", "ss"}
    # The same offer reached from several trees is listed once.
    assert named(shared, resources="DISK_GB:100") == {
        one(cn2={"DISK_GB": 100}), one(ss={"DISK_GB": 100}), one(lonely={"DISK_GB": 100})}
    # Traits of the sharing provider count for the unsuffixed group.
    assert named(shared, resources="VCPU:1,DISK_GB:100", required="CUSTOM_SSD") == {
        one(cn1={"VCPU": 1}, ss={"DISK_GB": 100}), one(cn2={"VCPU": 1}, ss={"DISK_GB": 100})}
    assert named(shared, resources="VCPU:1,DISK_GB:100", required="!CUSTOM_SSD") == {
        one(cn2={"VCPU": 1, "DISK_GB": 100})}


def test_sharing_with_aggregates_in_tree_and_root_required(shared):
    agg = shared.aggregate("a")
    other = shared.aggregate("b")
    shared.set_aggregates("cn2", "b")
    base = {"resources": "VCPU:1,DISK_GB:100"}
    assert named(shared, **base, member_of=agg) == {one(cn1={"VCPU": 1}, ss={"DISK_GB": 100})}
    assert named(shared, **base, member_of=other) == {one(cn2={"VCPU": 1, "DISK_GB": 100})}
    assert named(shared, **base, member_of="!" + agg) == {one(cn2={"VCPU": 1, "DISK_GB": 100})}
    # in_tree keeps the unsuffixed group out of other trees, sharing included.
    assert named(shared, **base, in_tree=shared.uuid("cn1")) == set()
    # ...but a granular group with in_tree of the sharing provider reaches out.
    assert named(shared, resources="VCPU:1", resources1="DISK_GB:100",
                 in_tree1=shared.uuid("ss")) == {one(cn1={"VCPU": 1}, ss={"DISK_GB": 100})}
    assert named(shared, **base, root_required="HW_CPU_X86_AVX2") == {
        one(cn2={"VCPU": 1, "DISK_GB": 100})}
    assert named(shared, **base, root_required="!HW_CPU_X86_AVX2") == {
        one(cn1={"VCPU": 1}, ss={"DISK_GB": 100})}


def test_granular_groups_and_group_policy(shared):
    query = {"resources1": "VCPU:1,MEMORY_MB:1024", "resources2": "DISK_GB:100"}
    assert named(shared, **query, group_policy="isolate") == {
        one(cn1={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100})}
    assert named(shared, **query, group_policy="none") == {
        one(cn1={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 100})}
    # A granular group's member_of is about the provider itself.
    assert named(shared, **query, group_policy="none", member_of2=shared.aggregate("a")) == {
        one(cn1={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100}),
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 100})}
    shared.set_aggregates("cn2", "b")
    shared.set_aggregates("ss", "a", "b")
    assert named(shared, **query, group_policy="none", member_of1=shared.aggregate("b"),
                 required2="CUSTOM_SSD") == {
        one(cn2={"VCPU": 1, "MEMORY_MB": 1024}, ss={"DISK_GB": 100})}


def test_nested_trees(numa):
    query = {"resources": "VCPU:1,SRIOV_NET_VF:2"}
    assert named(numa, **query, version="1.28") == set()
    assert named(numa, **query) == {
        one(numa0={"VCPU": 1}, pf0={"SRIOV_NET_VF": 2}),
        one(numa0={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2}),
        one(numa1={"VCPU": 1}, pf0={"SRIOV_NET_VF": 2}),
        one(numa1={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2})}
    # Required traits are met by the chosen providers together.
    assert named(numa, **query, required="CUSTOM_PHYSNET1,HW_NUMA_ROOT") == {
        one(numa0={"VCPU": 1}, pf0={"SRIOV_NET_VF": 2})}
    assert named(numa, **query, required="!CUSTOM_PHYSNET1") == {
        one(numa0={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2}),
        one(numa1={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2})}
    assert named(numa, **query, required=["in:CUSTOM_PHYSNET1,CUSTOM_PHYSNET2",
                                          "!HW_NUMA_ROOT"]) == {
        one(numa1={"VCPU": 1}, pf0={"SRIOV_NET_VF": 2}),
        one(numa1={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2})}
    # A trait on a provider that gives nothing does not count.
    assert named(numa, **query, required="COMPUTE_VOLUME_MULTI_ATTACH") == set()
    assert len(named(numa, **query, root_required="COMPUTE_VOLUME_MULTI_ATTACH")) == 4
    assert named(numa, **query, in_tree=numa.uuid("pf1")) == named(numa, **query)
    body = numa.candidates(**query, limit="1").json()
    assert len(body["allocation_requests"]) == 1
    assert len(body["provider_summaries"]) == 5


def test_same_subtree_and_resourceless_groups(numa):
    query = {"resources_C": "VCPU:1", "resources_N": "SRIOV_NET_VF:2", "group_policy": "none"}
    assert len(named(numa, **query)) == 4
    assert named(numa, **query, same_subtree="_C,_N") == {
        one(numa0={"VCPU": 1}, pf0={"SRIOV_NET_VF": 2}),
        one(numa1={"VCPU": 1}, pf1={"SRIOV_NET_VF": 2})}
    resp = numa.candidates(required_NUMA="HW_NUMA_ROOT", resources_N="SRIOV_NET_VF:2",
                           same_subtree="_NUMA,_N", group_policy="isolate")
    body = resp.json()
    assert numa.named(body) == [{"pf0": {"SRIOV_NET_VF": 2}}]
    assert body["allocation_requests"][0]["mappings"] == {
        "_NUMA": [numa.uuid("numa0")], "_N": [numa.uuid("pf0")]}
    # A provider may be its own subtree (but not under isolate).
    query = {"resources_C": "VCPU:1", "required_T": "HW_NUMA_ROOT", "same_subtree": "_C,_T"}
    assert named(numa, **query, group_policy="none") == {one(numa0={"VCPU": 1})}
    assert named(numa, **query, group_policy="isolate") == set()
    # A resourceless group with nothing to select by matches nothing.
    assert named(numa, resources_C="VCPU:1", required_T="!CUSTOM_PHYSNET1",
                 same_subtree="_C,_T", group_policy="none") == set()


def test_capacity_rules(client):
    cloud = Cloud(client)
    cloud.provider("cn", VCPU={"total": 4, "reserved": 1, "allocation_ratio": 2.0},
                   MEMORY_MB={"total": 1024, "min_unit": 256, "max_unit": 512,
                              "step_size": 256})
    assert named(cloud, resources="VCPU:6") == {one(cn={"VCPU": 6})}
    assert named(cloud, resources="VCPU:7") == set()
    cloud.consume({"cn": {"VCPU": 5}})
    assert named(cloud, resources="VCPU:1") == {one(cn={"VCPU": 1})}
    assert named(cloud, resources="VCPU:2") == set()
    body = cloud.candidates(resources="VCPU:1").json()
    assert body["provider_summaries"][cloud.uuid("cn")]["resources"]["VCPU"] == {
        "capacity": 6, "used": 5}
    for amount, fits in ((128, False), (256, True), (384, False), (512, True), (768, False)):
        assert bool(named(cloud, resources=f"MEMORY_MB:{amount}")) is fits, amount
    # Groups add up on one provider: capacity and max_unit apply to the sum.
    assert named(cloud, resources="MEMORY_MB:256", resources1="MEMORY_MB:256") == {
        one(cn={"MEMORY_MB": 512})}
    assert named(cloud, resources="MEMORY_MB:512", resources1="MEMORY_MB:256") == set()
    assert named(cloud, resources="VCPU:1", resources1="VCPU:1") == set()


def test_every_candidate_can_be_claimed(shared, numa):
    for cloud, query in ((shared, {"resources": "VCPU:1,DISK_GB:100",
                                   "resources1": "MEMORY_MB:512", "group_policy": "none"}),
                         (numa, {"resources": "VCPU:2", "resources_N": "SRIOV_NET_VF:8",
                                 "group_policy": "none"})):
        body = cloud.candidates(version="1.37", **query).json()
        assert body["allocation_requests"]
        for request in body["allocation_requests"]:
            consumer = str(uuid.uuid4())
            claim = dict(request, project_id=str(uuid.uuid4()), user_id=str(uuid.uuid4()),
                         consumer_generation=None)
            resp = cloud.client.put(f"/allocations/{consumer}", claim, version="1.37")
            assert resp.status == 204, resp
            assert cloud.client.delete(f"/allocations/{consumer}").status == 204


def test_limit_stops_and_summaries_follow(client):
    cloud = Cloud(client)
    for i in range(5):
        cloud.provider(f"cn{i}", VCPU=4)
        cloud.provider(f"cn{i}-numa", parent=f"cn{i}", MEMORY_MB=1024)
    body = cloud.candidates(resources="VCPU:1,MEMORY_MB:1", limit="2").json()
    assert len(body["allocation_requests"]) == 2
    assert len(body["provider_summaries"]) == 4
    body = cloud.candidates(resources="VCPU:1", limit="3").json()
    assert len(body["allocation_requests"]) == 3
    assert len(body["provider_summaries"]) == 6


def test_randomize_max_candidates_and_strategy(client, client_with):
    cloud = Cloud(client)
    for i in range(4):
        cloud.provider(f"cn{i}", VCPU=4)
        for j in range(3):
            cloud.provider(f"cn{i}-gpu{j}", parent=f"cn{i}", VGPU=1)
    query = {"resources": "VCPU:1", "resources1": "VGPU:1", "group_policy": "none"}
    everything = named(cloud, **query)
    assert len(everything) == 12

    def roots(found):
        return {name for request in found for name, _ in request if "-" not in name}

    def with_options(**options) -> Cloud:
        other = Cloud(client_with(**options))
        other.providers = cloud.providers
        return other

    # Depth-first: the first root's candidates, then the next root's.
    capped = with_options(max_allocation_candidates=4)
    assert len(named(capped, **query)) == 4
    assert roots(named(capped, **query)) == {"cn0", "cn1"}
    wide = with_options(max_allocation_candidates=4,
                        allocation_candidates_generation_strategy="breadth-first")
    assert roots(named(wide, **query)) == {"cn0", "cn1", "cn2", "cn3"}
    assert len(named(wide, **query, limit="2")) == 2
    shuffled = with_options(randomize_allocation_candidates=True)
    assert named(shuffled, **query) == everything
    seen = set()
    for _ in range(10):
        picked = named(shuffled, **query, limit="2")
        assert len(picked) == 2 and picked <= everything
        seen |= picked
    assert len(seen) > 2
    # With a cap, the sample is drawn from the capped (depth-first) pool.
    sampled = with_options(randomize_allocation_candidates=True, max_allocation_candidates=3)
    for _ in range(5):
        assert roots(named(sampled, **query, limit="2")) == {"cn0"}


def _wide_tree(cloud, name, children, each):
    cloud.provider(name, VCPU=32, MEMORY_MB=65536)
    for i in range(children):
        cloud.provider(f"{name}-dev{i}", parent=name, VGPU=each)


@pytest.mark.parametrize("policy", ["none", "isolate"])
def test_wide_tree_limit_and_too_many_groups(client, policy):
    cloud = Cloud(client)
    _wide_tree(cloud, "wide", 8, 1)
    _wide_tree(cloud, "wider", 16, 1)
    groups = {f"resources{i}": "VGPU:1" for i in range(1, 7)}
    resp = cloud.candidates(**groups, group_policy=policy, limit="10",
                            **{f"in_tree{i}": cloud.uuid("wide") for i in range(1, 7)})
    body = resp.json()
    assert len(body["allocation_requests"]) == 10
    for request in cloud.named(body):
        assert len(request) == 6 and all(res == {"VGPU": 1} for res in request.values())
    groups = {f"resources{i}": "VGPU:1" for i in range(1, 9)}
    resp = cloud.candidates(**groups, group_policy=policy, limit="10",
                            **{f"in_tree{i}": cloud.uuid("wider") for i in range(1, 9)})
    assert len(resp.json()["allocation_requests"]) == 10
    # Nine devices from a tree of eight: nothing, found without enumerating.
    groups = {f"resources{i}": "VGPU:1" for i in range(1, 10)}
    resp = cloud.candidates(**groups, group_policy=policy,
                            **{f"in_tree{i}": cloud.uuid("wide") for i in range(1, 10)})
    assert resp.json()["allocation_requests"] == []


def test_single_provider_answers_limit_and_random(client, client_with):
    cloud = Cloud(client)
    for i in range(6):
        cloud.provider(f"cn{i}", VCPU=4, MEMORY_MB=1024,
                       traits=["HW_CPU_X86_AVX2"] if i % 2 else [])
        cloud.provider(f"cn{i}-nic", parent=f"cn{i}", SRIOV_NET_VF=4)
    query = {"resources": "VCPU:1,MEMORY_MB:512", "required": "HW_CPU_X86_AVX2"}
    everything = named(cloud, **query)
    assert everything == {one(**{f"cn{i}": {"VCPU": 1, "MEMORY_MB": 512}}) for i in (1, 3, 5)}
    body = cloud.candidates(**query, limit="2").json()
    assert cloud.named(body) == [{"cn1": {"VCPU": 1, "MEMORY_MB": 512}},
                                 {"cn3": {"VCPU": 1, "MEMORY_MB": 512}}]
    # Whole trees are summarised (the nics too), and only theirs.
    assert {cloud.name_of(u) for u in body["provider_summaries"]} == {
        "cn1", "cn1-nic", "cn3", "cn3-nic"}
    body = cloud.candidates(version="1.28", **query, limit="2").json()
    assert {cloud.name_of(u) for u in body["provider_summaries"]} == {"cn1", "cn3"}
    shuffled = Cloud(client_with(randomize_allocation_candidates=True))
    shuffled.providers = cloud.providers
    seen = set()
    for _ in range(12):
        picked = named(shuffled, **query, limit="1")
        assert len(picked) == 1 and picked <= everything
        seen |= picked
    assert len(seen) > 1
    capped = Cloud(client_with(max_allocation_candidates=2))
    capped.providers = cloud.providers
    assert len(named(capped, **query)) == 2


def test_wide_tree_option_never_offers_more_than_is_free(client, database):
    """With ``[workarounds] optimize_for_wide_provider_trees`` upstream also offers
    pf2's two VFs of which one is used (doc/source/differences.md)."""
    cloud = Cloud(client)
    cloud.provider("root", VCPU=8)
    cloud.provider("pf1", parent="root", CUSTOM_MY_VF=1)
    cloud.provider("pf2", parent="root", CUSTOM_MY_VF=2)
    cloud.consume({"pf2": {"CUSTOM_MY_VF": 1}})
    conf = make_conf(database.url, workarounds__optimize_for_wide_provider_trees=True)
    wide = Cloud(PlacementClient(make_app(conf, db=database.db, prepare=False)))
    wide.providers = cloud.providers
    query = {"resources": "VCPU:1", "resources_a": "CUSTOM_MY_VF:1",
             "resources_b": "CUSTOM_MY_VF:1", "group_policy": "none"}
    for answering in (cloud, wide):
        body = answering.candidates(version="1.36", **query).json()
        assert sorted(sorted(answering.name_of(u) for u in req["mappings"]["_a"] +
                             req["mappings"]["_b"]) for req in body["allocation_requests"]) \
            == [["pf1", "pf2"], ["pf1", "pf2"]]
        assert all(resources["resources"] == {"CUSTOM_MY_VF": 1}
                   for req in body["allocation_requests"]
                   for uuid, resources in req["allocations"].items()
                   if answering.name_of(uuid) != "root")


class CountingSource(ModelSource):
    """A source that counts the providers its match is asked about."""

    def __init__(self, state) -> None:
        super().__init__(state)
        self.asked = 0

    def match(self, groups, sharing_trait, roots, unsuffixed_traits, among=None):
        self.asked += len(self.state.providers) if among is None else len(among)
        return super().match(groups, sharing_trait, roots, unsuffixed_traits, among)


def test_a_limited_spread_search_lays_out_only_the_trees_it_walks(client, database):
    # A hundred hosts, each with a child holding bandwidth; a sharing disk pool
    # for every ten. The disk may come from the pool: the spread path.
    cloud = Cloud(client)
    for rack in range(10):
        cloud.provider(f"pool{rack}", DISK_GB=10_000, traits=[SHARES],
                       aggregates=[f"rack{rack}"])
    for host in range(100):
        cloud.provider(f"cn{host}", VCPU=8, MEMORY_MB=4096, DISK_GB=100,
                       aggregates=[f"rack{host // 10}"])
        cloud.provider(f"cn{host}-pf", parent=f"cn{host}", NET_BW_EGR_KILOBIT_PER_SEC=1000)
    with database.db.snapshot() as conn:
        state = load(conn)
    request = CandidateRequest(groups=(RequestGroup("", {"VCPU": 1, "DISK_GB": 10}),))
    whole = CountingSource(state)
    every = [c.key() for c in engine.find(whole, request, Settings()).candidates]
    assert len(every) == 200  # each host's own disk, and its rack's pool
    assert whole.asked == len(state.providers)

    for limit, settings in ((3, Settings()), (None, Settings(max_candidates=3))):
        limited = CountingSource(state)
        found = engine.find(limited, replace(request, limit=limit), settings).candidates
        assert [c.key() for c in found] == every[:3]
        # The pools, and the first window of 16 trees (the pools' own trees
        # come first and give nothing: six hosts of two providers each).
        assert limited.asked == 10 + 2 * 6, limited.asked

    # Where the sharing providers are a large part of the cloud, the whole plan.
    for pool in range(10, 40):
        cloud.provider(f"pool{pool}", DISK_GB=10_000, traits=[SHARES],
                       aggregates=[f"rack{pool % 10}"])
    with database.db.snapshot() as conn:
        state = load(conn)
    limited = CountingSource(state)
    engine.find(limited, replace(request, limit=3), Settings())
    assert limited.asked == len(state.providers)
