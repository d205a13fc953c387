"""Nova's side of the conversation: the calls its report client makes, at its microversions.

Each test is one story told the way nova/scheduler/client/report.py tells it: which
request goes out at which microversion, and which parts of the answer nova reads
(status codes, generations it caches, error codes it matches on). Provider
generations are tracked the way nova tracks them: taken from the answers it gets,
never re-read unless nova would re-read them.

Generation rule asserted throughout (as upstream's allocation writer does it): a write
of allocations bumps every provider that appears in the allocation list it writes.
That list holds the NEW allocations of every consumer in the request, and, for a
consumer whose allocations are emptied ({}), its old allocations with used=0, so those
providers are bumped too. A provider that a consumer leaves while getting other,
non-empty allocations is not bumped; DELETE /allocations/{consumer} bumps none.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from tests.support.client import PlacementClient, Response

PROJECT = "8c8a5e1b7d2f4f0e9c3b2a1d0e9f8a7b"
USER = "2f3e4d5c6b7a48899a0b1c2d3e4f5a6b"
OTHER_PROJECT = "0a1b2c3d4e5f46a7b8c9d0e1f2a3b4c5"
# POST /reshaper is service-only by default: nova calls it with its service token.
SERVICE = {"X-Roles": "admin,service"}

# Microversions nova's report client uses for each call.
NESTED = "1.14"          # GET /resource_providers?in_tree=
CREATE_RP = "1.20"       # POST /resource_providers returning the body
TRAITS = "1.6"           # GET/PUT .../traits, PUT /traits/CUSTOM_*
RESOURCE_CLASS = "1.7"   # PUT /resource_classes/CUSTOM_*
AGGREGATES = "1.19"      # GET/PUT .../aggregates with a generation
INVENTORY = "1.26"       # PUT .../inventories (reserved may equal total)
CONSUMER_GEN = "1.28"    # GET/PUT/POST allocations with consumer generations
RESHAPER = "1.30"
CANDIDATES = "1.36"      # GET /allocation_candidates, PUT /allocations claims
USAGES = "1.9"
USAGES_BY_TYPE = "1.38"

INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                    "allocation_ratio")


def _uuid() -> str:
    return str(uuid.uuid4())


def ok(resp: Response, status: int = 200) -> Response:
    assert resp.status == status, resp
    return resp


def conflict(resp: Response, code: str | None) -> None:
    """A 409 as nova tells them apart: by the error code (None: below 1.23, no code)."""
    assert resp.status == 409, resp
    assert resp.error_code == code, resp


def in_tree(client: PlacementClient, root: str) -> dict[str, dict[str, Any]]:
    """GET /resource_providers?in_tree= as nova's provider tree refresh reads it."""
    resp = ok(client.get(f"/resource_providers?in_tree={root}", version=NESTED))
    return {rp["uuid"]: {"name": rp["name"], "generation": rp["generation"],
                         "parent": rp["parent_provider_uuid"], "root": rp["root_provider_uuid"]}
            for rp in resp.json()["resource_providers"]}


def create_provider(client: PlacementClient, name: str, rp_uuid: str,
                    parent: str | None = None) -> int:
    """POST /resource_providers at 1.20; nova caches the generation from the body."""
    body: dict[str, Any] = {"name": name, "uuid": rp_uuid}
    if parent is not None:
        body["parent_provider_uuid"] = parent
    created = ok(client.post("/resource_providers", body, version=CREATE_RP)).json()
    assert created["uuid"] == rp_uuid
    assert created["name"] == name
    assert created["parent_provider_uuid"] == parent
    assert created["root_provider_uuid"] == (in_tree(client, parent)[parent]["root"]
                                             if parent else rp_uuid)
    assert created["generation"] == 0
    return created["generation"]


def inventory(total: int, reserved: int = 0, max_unit: int | None = None,
              ratio: float = 1.0) -> dict[str, Any]:
    """An inventory record in the shape nova sends (every field given)."""
    return {"total": total, "reserved": reserved, "min_unit": 1,
            "max_unit": total if max_unit is None else max_unit, "step_size": 1,
            "allocation_ratio": ratio}


def put_inventories(client: PlacementClient, rp: str, generation: int,
                    records: dict[str, dict[str, Any]]) -> Response:
    return client.put(f"/resource_providers/{rp}/inventories",
                      {"resource_provider_generation": generation, "inventories": records},
                      version=INVENTORY)


def set_inventories(client: PlacementClient, rp: str, generation: int,
                    records: dict[str, dict[str, Any]]) -> int:
    """_update_inventory: PUT, then read the new generation from the answer."""
    shown = ok(put_inventories(client, rp, generation, records)).json()
    assert shown["resource_provider_generation"] == generation + 1
    assert {rc: {f: rec[f] for f in INVENTORY_FIELDS}
            for rc, rec in shown["inventories"].items()} == records
    return shown["resource_provider_generation"]


def set_traits(client: PlacementClient, rp: str, generation: int, traits: list[str]) -> int:
    for name in traits:
        if name.startswith("CUSTOM_"):
            # _ensure_traits: PUT /traits/{name}, 201 new or 204 existing.
            assert client.put(f"/traits/{name}", version=TRAITS).status in (201, 204)
    shown = ok(client.put(f"/resource_providers/{rp}/traits",
                          {"traits": traits, "resource_provider_generation": generation},
                          version=TRAITS)).json()
    assert sorted(shown["traits"]) == sorted(traits)
    assert shown["resource_provider_generation"] == generation + 1
    return shown["resource_provider_generation"]


def set_aggregates(client: PlacementClient, rp: str, generation: int,
                   aggregates: list[str]) -> int:
    shown = ok(client.put(f"/resource_providers/{rp}/aggregates",
                          {"aggregates": aggregates, "resource_provider_generation": generation},
                          version=AGGREGATES)).json()
    assert sorted(shown["aggregates"]) == sorted(aggregates)
    assert shown["resource_provider_generation"] == generation + 1
    return shown["resource_provider_generation"]


def register_compute(client: PlacementClient, name: str, records: dict[str, dict[str, Any]],
                     traits: Sequence[str] = (), aggregates: Sequence[str] = ()
                     ) -> tuple[str, int]:
    """The resource tracker's first update_from_provider_tree for a compute node."""
    cn = _uuid()
    assert in_tree(client, cn) == {}
    generation = create_provider(client, name, cn)
    generation = set_inventories(client, cn, generation, records)
    if traits:
        generation = set_traits(client, cn, generation, list(traits))
    if aggregates:
        generation = set_aggregates(client, cn, generation, list(aggregates))
    return cn, generation


def generation_of(client: PlacementClient, rp: str) -> int:
    """A fresh read (what nova gets on its next tree refresh)."""
    return ok(client.get(f"/resource_providers/{rp}", version=NESTED)).json()["generation"]


def allocations_of(client: PlacementClient, consumer: str) -> dict[str, Any]:
    """GET /allocations/{consumer} at 1.28, as get_allocs_for_consumer reads it."""
    return ok(client.get(f"/allocations/{consumer}", version=CONSUMER_GEN)).json()


def resources_of(shown: dict[str, Any]) -> dict[str, dict[str, int]]:
    return {rp: entry["resources"] for rp, entry in shown["allocations"].items()}


def claim_body(allocations: dict[str, dict[str, int]], generation: int | None,
               project: str = PROJECT, user: str = USER, **extra: Any) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": res} for rp, res in allocations.items()},
            "project_id": project, "user_id": user, "consumer_generation": generation,
            **extra}


def claim(client: PlacementClient, consumer: str, allocations: dict[str, dict[str, int]],
          generation: int | None, version: str = CANDIDATES, **extra: Any) -> Response:
    """claim_resources: PUT /allocations/{consumer}."""
    return client.put(f"/allocations/{consumer}", claim_body(allocations, generation, **extra),
                      version=version)


def candidates(client: PlacementClient, query: str) -> dict[str, Any]:
    return ok(client.get(f"/allocation_candidates?{query}", version=CANDIDATES)).json()


def usages(client: PlacementClient, query: str, version: str = USAGES) -> dict[str, Any]:
    return ok(client.get(f"/usages?{query}", version=version)).json()["usages"]


def provider_usages(client: PlacementClient, rp: str) -> dict[str, int]:
    return ok(client.get(f"/resource_providers/{rp}/usages")).json()["usages"]


COMPUTE = {"VCPU": inventory(8, ratio=4.0), "MEMORY_MB": inventory(16384, reserved=512),
           "DISK_GB": inventory(200)}
FLAVOR = {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20}
FLAVOR_QUERY = "resources=VCPU:2,MEMORY_MB:2048,DISK_GB:20"


# --- 1. the resource tracker registers a compute node tree -------------------------

def test_register_compute_node_tree(client: PlacementClient) -> None:
    cn, pf = _uuid(), _uuid()
    agg = _uuid()

    # _ensure_resource_provider: nothing in the tree yet, so create the root.
    assert in_tree(client, cn) == {}
    generation = create_provider(client, "compute1", cn)
    # A second node claiming the same hypervisor name. Error codes come at 1.23, so at
    # 1.20 nova tells a name clash from a uuid race by the detail text.
    clash = client.post("/resource_providers", {"name": "compute1", "uuid": _uuid()},
                        version=CREATE_RP)
    conflict(clash, None)
    assert "Conflicting resource provider name: compute1 already exists" in clash.detail
    conflict(client.post("/resource_providers", {"name": "compute1", "uuid": _uuid()},
                         version="1.39"), "placement.duplicate_name")
    # Another thread created the same uuid first: not a name clash, so nova reads it.
    race = client.post("/resource_providers", {"name": "compute1", "uuid": cn},
                       version=CREATE_RP)
    conflict(race, None)
    assert "Conflicting resource provider name" not in race.detail
    assert f"Conflicting resource provider uuid: {cn} already exists" in race.detail
    assert in_tree(client, cn)[cn]["generation"] == 0
    # The associations refresh right after creation.
    assert ok(client.get(f"/resource_providers/{cn}/aggregates", version=AGGREGATES)).json() \
        == {"aggregates": [], "resource_provider_generation": 0}
    assert ok(client.get(f"/resource_providers/{cn}/traits", version=TRAITS)).json() \
        == {"traits": [], "resource_provider_generation": 0}
    sharing = ok(client.get(f"/resource_providers?member_of=in:{agg}"
                            "&required=MISC_SHARES_VIA_AGGREGATE", version="1.18")).json()
    assert sharing == {"resource_providers": []}

    # _ensure_resource_classes: 201 the first time, 204 after.
    assert ok(client.put("/resource_classes/CUSTOM_PMEM_NS", version=RESOURCE_CLASS),
              201).headers["location"].endswith("/resource_classes/CUSTOM_PMEM_NS")
    ok(client.put("/resource_classes/CUSTOM_PMEM_NS", version=RESOURCE_CLASS), 204)

    # Inventory: reserved == total is allowed from 1.26 (a disabled custom resource).
    records = {**COMPUTE, "CUSTOM_PMEM_NS": inventory(2, reserved=2)}
    stale = generation
    generation = set_inventories(client, cn, generation, records)
    assert generation == 1
    # A second writer with the generation nova had cached: refused, nothing changed.
    conflict(put_inventories(client, cn, stale, {"VCPU": inventory(4)}),
             "placement.concurrent_update")
    shown = ok(client.get(f"/resource_providers/{cn}/inventories")).json()
    assert shown["resource_provider_generation"] == 1
    assert shown["inventories"]["VCPU"]["total"] == 8

    # Traits and aggregates, each with the generation from the previous answer.
    generation = set_traits(client, cn, generation, ["HW_CPU_X86_AVX2",
                                                     "COMPUTE_NET_ATTACH_INTERFACE",
                                                     "CUSTOM_GOLD"])
    conflict(client.put(f"/resource_providers/{cn}/traits",
                        {"traits": [], "resource_provider_generation": generation - 1},
                        version=TRAITS), None)
    generation = set_aggregates(client, cn, generation, [agg])
    conflict(client.put(f"/resource_providers/{cn}/aggregates",
                        {"aggregates": [], "resource_provider_generation": generation - 1},
                        version=AGGREGATES), None)
    assert generation == 3

    # A child provider for a NIC's physical function, created with its parent.
    assert create_provider(client, "compute1:pf0", pf, parent=cn) == 0
    pf_generation = set_inventories(client, pf, 0, {"SRIOV_NET_VF": inventory(8)})
    pf_generation = set_traits(client, pf, pf_generation, ["CUSTOM_PHYSNET_NET1"])

    # The tree as nova's ProviderTree rebuilds it; the child did not bump its parent.
    assert in_tree(client, cn) == {
        cn: {"name": "compute1", "generation": 3, "parent": None, "root": cn},
        pf: {"name": "compute1:pf0", "generation": pf_generation, "parent": cn, "root": cn},
    }
    assert in_tree(client, pf) == in_tree(client, cn)
    # An unchanged inventory written again still moves the generation.
    assert set_inventories(client, cn, generation, records) == 4


# --- 2. the scheduler asks for candidates, picks one and claims it ---------------------

def test_schedule_with_candidates_and_claim(client: PlacementClient) -> None:
    agg = _uuid()
    cn1, gen1 = register_compute(client, "compute1", COMPUTE, traits=["HW_CPU_X86_AVX2"],
                                 aggregates=[agg])
    cn2, gen2 = register_compute(client, "compute2", COMPUTE,
                                 traits=["HW_CPU_X86_AVX2", "COMPUTE_STATUS_DISABLED"])
    pf = _uuid()
    create_provider(client, "compute1:pf0", pf, parent=cn1)
    pf_gen = set_inventories(client, pf, 0, {"SRIOV_NET_VF": inventory(8)})

    # Both hosts fit; limit cuts the answer to one request.
    everything = candidates(client, FLAVOR_QUERY)
    assert len(everything["allocation_requests"]) == 2
    limited = candidates(client, f"{FLAVOR_QUERY}&limit=1")
    assert len(limited["allocation_requests"]) == 1
    picked = limited["allocation_requests"][0]
    assert set(picked["allocations"]) <= {cn1, cn2}
    for rp in picked["allocations"]:
        summary = limited["provider_summaries"][rp]
        assert summary["root_provider_uuid"] == rp
        assert summary["parent_provider_uuid"] is None
        assert summary["resources"]["VCPU"] == {"capacity": 32, "used": 0}
        assert summary["resources"]["MEMORY_MB"] == {"capacity": 15872, "used": 0}

    # The ComputeFilter's pre-filter: a disabled host is left out by root_required.
    enabled = candidates(client, f"{FLAVOR_QUERY}&root_required=!COMPUTE_STATUS_DISABLED"
                                 f"&required=HW_CPU_X86_AVX2&member_of=in:{agg}&limit=1000")
    assert [set(r["allocations"]) for r in enabled["allocation_requests"]] == [{cn1}]
    assert enabled["provider_summaries"][cn1]["traits"] == ["HW_CPU_X86_AVX2"]

    # A port with a VF: a granular group for the child, isolated from the unnumbered one.
    query = (f"{FLAVOR_QUERY}&resources1=SRIOV_NET_VF:1&group_policy=isolate"
             "&root_required=!COMPUTE_STATUS_DISABLED&limit=1000")
    found = candidates(client, query)
    assert len(found["allocation_requests"]) == 1
    request = found["allocation_requests"][0]
    assert {rp: a["resources"] for rp, a in request["allocations"].items()} == {
        cn1: FLAVOR, pf: {"SRIOV_NET_VF": 1}}
    assert request["mappings"] == {"": [cn1], "1": [pf]}
    assert found["provider_summaries"][pf]["parent_provider_uuid"] == cn1
    assert found["provider_summaries"][pf]["root_provider_uuid"] == cn1

    # claim_resources: the allocation request as is, consumer_generation None (new).
    instance = _uuid()
    ok(client.put(f"/allocations/{instance}",
                  {"allocations": request["allocations"], "mappings": request["mappings"],
                   "project_id": PROJECT, "user_id": USER, "consumer_generation": None},
                  version=CANDIDATES), 204)
    shown = allocations_of(client, instance)
    assert resources_of(shown) == {cn1: FLAVOR, pf: {"SRIOV_NET_VF": 1}}
    assert shown["allocations"][cn1]["generation"] == gen1 + 1
    assert shown["allocations"][pf]["generation"] == pf_gen + 1
    assert (shown["consumer_generation"], shown["project_id"], shown["user_id"]) \
        == (1, PROJECT, USER)
    assert generation_of(client, cn2) == gen2

    # A retried claim from a second scheduler that still believes the consumer is new.
    conflict(claim(client, instance, {cn2: FLAVOR}, None), "placement.concurrent_update")
    # A stale consumer generation is the same conflict.
    conflict(claim(client, instance, {cn2: FLAVOR}, 0), "placement.concurrent_update")
    assert resources_of(allocations_of(client, instance)) == {cn1: FLAVOR,
                                                              pf: {"SRIOV_NET_VF": 1}}

    # A claim beyond capacity is a 409 nova does not retry (not concurrent_update).
    big = _uuid()
    conflict(claim(client, big, {cn1: {"MEMORY_MB": 14000}}, None),
             "placement.undefined_code")
    assert allocations_of(client, big) == {"allocations": {}}

    # Candidates now see the usage.
    after = candidates(client, f"{FLAVOR_QUERY}&root_required=!COMPUTE_STATUS_DISABLED")
    assert after["provider_summaries"][cn1]["resources"]["VCPU"] == {"capacity": 32, "used": 2}

    # The resource tracker's next inventory update with the generation it cached
    # before the claim: stale, so it refreshes the tree and tries again.
    conflict(put_inventories(client, cn1, gen1, COMPUTE), "placement.concurrent_update")
    fresh = in_tree(client, cn1)[cn1]["generation"]
    assert fresh == gen1 + 1
    set_inventories(client, cn1, fresh, {**COMPUTE, "VCPU": inventory(16, ratio=4.0)})
    # Dropping a resource class that is in use: nova matches inventory.inuse.
    dropped = {"VCPU": COMPUTE["VCPU"], "MEMORY_MB": COMPUTE["MEMORY_MB"]}
    conflict(put_inventories(client, cn1, fresh + 1, dropped), "placement.inventory.inuse")

    # Quota counting from placement.
    assert usages(client, f"project_id={PROJECT}") == {
        "VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 20, "SRIOV_NET_VF": 1}
    assert usages(client, f"project_id={PROJECT}&user_id={USER}")["VCPU"] == 2
    assert usages(client, f"project_id={OTHER_PROJECT}") == {}


# --- 3. a cold migration moves the instance with POST /allocations --------------------

def test_migrate_with_post_allocations(client: PlacementClient) -> None:
    src, src_gen = register_compute(client, "source", COMPUTE)
    dst, dst_gen = register_compute(client, "dest", COMPUTE)
    instance, migration = _uuid(), _uuid()
    ok(claim(client, instance, {src: FLAVOR}, None), 204)
    src_gen += 1
    assert generation_of(client, src) == src_gen

    # move_allocations reads both consumers first.
    source_allocs = allocations_of(client, instance)
    assert source_allocs["consumer_generation"] == 1
    # A consumer with no allocations: no generation, no project, no user.
    assert allocations_of(client, migration) == {"allocations": {}}

    # One request: the migration holds the source, the instance claims the destination.
    swap = {
        migration: claim_body(resources_of(source_allocs), None),
        instance: claim_body({dst: FLAVOR}, source_allocs["consumer_generation"]),
    }
    ok(client.post("/allocations", swap, version=CONSUMER_GEN), 204)
    # The source appears in the new allocations (the migration's): bumped, as the
    # destination is.
    src_gen, dst_gen = src_gen + 1, dst_gen + 1
    assert (generation_of(client, src), generation_of(client, dst)) == (src_gen, dst_gen)
    held = allocations_of(client, migration)
    assert (resources_of(held), held["consumer_generation"]) == ({src: FLAVOR}, 1)
    moved = allocations_of(client, instance)
    assert (resources_of(moved), moved["consumer_generation"]) == ({dst: FLAVOR}, 2)
    assert moved["allocations"][dst]["generation"] == dst_gen
    assert provider_usages(client, src)["VCPU"] == 2
    assert provider_usages(client, dst)["VCPU"] == 2

    # The same POST again, from a conductor holding the old consumer generations.
    conflict(client.post("/allocations", swap, version=CONSUMER_GEN),
             "placement.concurrent_update")
    assert resources_of(allocations_of(client, instance)) == {dst: FLAVOR}
    assert (generation_of(client, src), generation_of(client, dst)) == (src_gen, dst_gen)

    # Revert resize: the instance gets the source back, the migration is emptied.
    revert = {
        instance: claim_body(resources_of(held), moved["consumer_generation"]),
        migration: claim_body({}, held["consumer_generation"]),
    }
    ok(client.post("/allocations", revert, version=CONSUMER_GEN), 204)
    # The source is in the instance's new allocations (and in the emptied migration's
    # old ones): bumped. The destination is left by the instance, whose new allocations
    # are elsewhere: not bumped.
    src_gen += 1
    assert (generation_of(client, src), generation_of(client, dst)) == (src_gen, dst_gen)
    back = allocations_of(client, instance)
    assert (resources_of(back), back["consumer_generation"]) == ({src: FLAVOR}, 3)
    assert allocations_of(client, migration) == {"allocations": {}}
    assert provider_usages(client, dst)["VCPU"] == 0

    # Migrate again, this time confirmed.
    migration = _uuid()
    ok(client.post("/allocations", {
        migration: claim_body({src: FLAVOR}, None),
        instance: claim_body({dst: FLAVOR}, back["consumer_generation"]),
    }, version=CONSUMER_GEN), 204)
    src_gen, dst_gen = src_gen + 1, dst_gen + 1
    assert (generation_of(client, src), generation_of(client, dst)) == (src_gen, dst_gen)
    # Confirm: the migration's allocations on the source are dropped. DELETE bumps no
    # provider: the source keeps its generation.
    ok(client.delete(f"/allocations/{migration}", version=CONSUMER_GEN), 204)
    assert (generation_of(client, src), generation_of(client, dst)) == (src_gen, dst_gen)
    assert provider_usages(client, src)["VCPU"] == 0
    assert allocations_of(client, migration) == {"allocations": {}}
    final = allocations_of(client, instance)
    assert (resources_of(final), final["consumer_generation"]) == ({dst: FLAVOR}, 4)
    assert usages(client, f"project_id={PROJECT}") == FLAVOR


# --- 4. the virt driver reshapes VGPU inventory onto a child provider -----------------

def test_reshape_vgpu_to_a_child_provider(client: PlacementClient) -> None:
    records = {**COMPUTE, "VGPU": inventory(4)}
    cn, cn_gen = register_compute(client, "compute1", records)
    instance = _uuid()
    ok(claim(client, instance, {cn: {**FLAVOR, "VGPU": 1}}, None), 204)

    # update_provider_tree raised ReshapeNeeded: nova gathers the tree's allocations.
    tree_allocs = ok(client.get(f"/resource_providers/{cn}/allocations")).json()
    assert tree_allocs["resource_provider_generation"] == cn_gen + 1
    assert tree_allocs["allocations"] == {instance: {"resources": {**FLAVOR, "VGPU": 1}}}
    consumer = allocations_of(client, instance)
    assert consumer["consumer_generation"] == 1

    # The driver's new tree: a pGPU child, created before the reshape.
    gpu = _uuid()
    create_provider(client, "compute1_pci_0000_84_00_0", gpu, parent=cn)
    cached = in_tree(client, cn)
    assert cached[cn]["generation"] == cn_gen + 1

    def reshape(root_gen: int, gpu_gen: int, consumer_gen: int) -> Response:
        return client.post("/reshaper", {
            "inventories": {
                cn: {"resource_provider_generation": root_gen, "inventories": COMPUTE},
                gpu: {"resource_provider_generation": gpu_gen,
                      "inventories": {"VGPU": inventory(4)}},
            },
            "allocations": {
                instance: claim_body({cn: FLAVOR, gpu: {"VGPU": 1}}, consumer_gen),
            },
        }, version=RESHAPER, headers=SERVICE)

    ok(reshape(cached[cn]["generation"], cached[gpu]["generation"],
               consumer["consumer_generation"]), 204)
    # Interim inventory, allocations, final inventory: three bumps for each provider.
    tree = in_tree(client, cn)
    assert tree[cn]["generation"] == cached[cn]["generation"] + 3
    assert tree[gpu] == {"name": "compute1_pci_0000_84_00_0",
                         "generation": cached[gpu]["generation"] + 3,
                         "parent": cn, "root": cn}
    shown = allocations_of(client, instance)
    assert resources_of(shown) == {cn: FLAVOR, gpu: {"VGPU": 1}}
    assert shown["consumer_generation"] == 2
    assert set(ok(client.get(f"/resource_providers/{cn}/inventories")).json()["inventories"]) \
        == set(COMPUTE)
    assert provider_usages(client, gpu) == {"VGPU": 1}
    assert "VGPU" not in provider_usages(client, cn)

    # The same reshape again with what nova had cached: a provider generation conflict.
    conflict(reshape(cached[cn]["generation"], cached[gpu]["generation"], 2),
             "placement.concurrent_update")
    # Fresh provider generations but a stale consumer generation: also concurrent_update.
    conflict(reshape(tree[cn]["generation"], tree[gpu]["generation"], 1),
             "placement.concurrent_update")
    assert in_tree(client, cn) == tree

    # The scheduler now finds the VGPU in a granular group on the child.
    found = candidates(client, f"{FLAVOR_QUERY}&resources1=VGPU:1&group_policy=none"
                               "&root_required=!COMPUTE_STATUS_DISABLED&limit=1000")
    assert [{rp: a["resources"] for rp, a in r["allocations"].items()}
            for r in found["allocation_requests"]] == [{cn: FLAVOR, gpu: {"VGPU": 1}}]
    assert found["provider_summaries"][gpu]["resources"]["VGPU"] == {"capacity": 4,
                                                                     "used": 1}


# --- 5. heal allocations, count usages, delete everything ----------------------------

def test_heal_usages_and_delete(client: PlacementClient) -> None:
    cn, cn_gen = register_compute(client, "compute1", COMPUTE)
    pf = _uuid()
    create_provider(client, "compute1:pf0", pf, parent=cn)
    pf_gen = set_inventories(client, pf, 0, {"SRIOV_NET_VF": inventory(8)})
    healthy, lost, other = _uuid(), _uuid(), _uuid()
    ok(claim(client, healthy, {cn: FLAVOR, pf: {"SRIOV_NET_VF": 1}}, None), 204)
    ok(claim(client, other, {cn: {"VCPU": 1, "MEMORY_MB": 512}}, None,
             project=OTHER_PROJECT), 204)
    cn_gen, pf_gen = cn_gen + 2, pf_gen + 1

    # nova-manage placement heal_allocations: an instance with no allocations at all
    # gets them, with its project and user, as a new consumer.
    assert allocations_of(client, lost) == {"allocations": {}}
    ok(claim(client, lost, {cn: FLAVOR}, None, version=CONSUMER_GEN), 204)
    cn_gen += 1
    healed = allocations_of(client, lost)
    assert (healed["project_id"], healed["user_id"], healed["consumer_generation"]) \
        == (PROJECT, USER, 1)
    # An instance whose consumer has the wrong user: the same allocations written back
    # with the right project/user and the consumer generation just read.
    ok(claim(client, other, {cn: {"VCPU": 1, "MEMORY_MB": 512}}, 1,
             project=OTHER_PROJECT, user="fixed-user", version=CONSUMER_GEN), 204)
    cn_gen += 1
    fixed = allocations_of(client, other)
    assert (fixed["user_id"], fixed["consumer_generation"]) == ("fixed-user", 2)
    # Healing with a consumer generation that moved on is refused.
    conflict(claim(client, other, {cn: {"VCPU": 1}}, 1, project=OTHER_PROJECT,
                   version=CONSUMER_GEN), "placement.concurrent_update")
    assert generation_of(client, cn) == cn_gen

    # Quota usages: per project, per user, and from 1.38 by consumer type.
    assert usages(client, f"project_id={PROJECT}") == {
        "VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 40, "SRIOV_NET_VF": 1}
    assert usages(client, f"project_id={OTHER_PROJECT}&user_id=fixed-user") == {
        "VCPU": 1, "MEMORY_MB": 512}
    ok(claim(client, lost, {cn: FLAVOR}, 1, version=USAGES_BY_TYPE,
             consumer_type="INSTANCE"), 204)
    cn_gen += 1
    assert usages(client, f"project_id={PROJECT}", version=USAGES_BY_TYPE) == {
        "INSTANCE": {"consumer_count": 1, **FLAVOR},
        "unknown": {"consumer_count": 1, **FLAVOR, "SRIOV_NET_VF": 1},
    }
    assert usages(client, f"project_id={PROJECT}&consumer_type=INSTANCE",
                  version=USAGES_BY_TYPE) == {"INSTANCE": {"consumer_count": 1, **FLAVOR}}

    # A provider with allocations cannot go (nova deletes at 1.0, where 409s carry no
    # code; later microversions name the reason).
    conflict(client.delete(f"/resource_providers/{pf}"), None)
    conflict(client.delete(f"/resource_providers/{pf}", version="1.39"),
             "placement.resource_provider.inuse")

    # delete_allocation_for_instance: read the consumer, then PUT empty allocations
    # with its generation. The emptied consumer's providers are bumped: upstream hands
    # its old allocations to replace_all with used=0, and _set_allocations bumps every
    # provider _check_capacity_exceeded returns, those included.
    current = allocations_of(client, healthy)
    ok(client.put(f"/allocations/{healthy}",
                  {**current, "allocations": {}}, version=CONSUMER_GEN), 204)
    cn_gen, pf_gen = cn_gen + 1, pf_gen + 1
    assert (generation_of(client, cn), generation_of(client, pf)) == (cn_gen, pf_gen)
    assert allocations_of(client, healthy) == {"allocations": {}}
    # The forced path: DELETE. No provider generation moves.
    ok(client.delete(f"/allocations/{lost}"), 204)
    ok(client.delete(f"/allocations/{other}"), 204)
    assert client.delete(f"/allocations/{other}").status == 404
    assert generation_of(client, cn) == cn_gen
    assert usages(client, f"project_id={PROJECT}") == {}
    assert provider_usages(client, cn) == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}

    # Compute service delete: not the root while it has a child; the child first.
    conflict(client.delete(f"/resource_providers/{cn}"), None)
    conflict(client.delete(f"/resource_providers/{cn}", version="1.39"),
             "placement.resource_provider.cannot_delete_parent")
    ok(client.delete(f"/resource_providers/{pf}"), 204)
    ok(client.delete(f"/resource_providers/{cn}"), 204)
    assert in_tree(client, cn) == {}
    assert client.get(f"/resource_providers/{cn}").status == 404
