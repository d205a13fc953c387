"""The request sequences of the side-by-side check: deterministic for a seed.

Every uuid is chosen by the client (from the seeded generator) wherever the API
allows it. Generations in write bodies are ``"$GEN{uuid}"`` / ``"$CGEN{uuid}"``
placeholders filled per server (see ``sidebyside.Step``), except where a stale
generation is the point of the request.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

from tests.clients.sidebyside import Step

LATEST = 39
ALL = [f"1.{minor}" for minor in range(LATEST + 1)]

# fact -> first minor version (allotment/http/microversion.py GATES, by number).
GATES = {
    "aggregates": 1, "resource_classes": 2, "member_of": 3, "resources_filter": 4,
    "delete_all_inventories": 5, "traits": 6, "resource_class_put_create": 7,
    "require_project_user": 8, "usages": 9, "allocation_candidates": 10,
    "provider_allocations_link": 11, "allocations_dict_format": 12, "post_allocations": 13,
    "provider_tree": 14, "cache_headers": 15, "candidates_limit": 16,
    "candidates_required": 17, "providers_required": 18, "aggregates_generation": 19,
    "create_provider_returns_body": 20, "candidates_member_of": 21, "forbidden_traits": 22,
    "error_codes": 23, "multiple_member_of": 24, "granular": 25, "reserved_equals_total": 26,
    "summaries_all_inventory": 27, "consumer_generation": 28, "nested_candidates": 29,
    "reshaper": 30, "in_tree_candidates": 31, "forbidden_aggregates": 32,
    "string_group_suffix": 33, "mappings": 34, "root_required": 35, "same_subtree": 36,
    "reparent": 37, "consumer_types": 38, "any_traits": 39,
}


def around(*gates: int, extra: tuple[int, ...] = (0, LATEST)) -> list[str]:
    """Versions just before, at and just after each gate, plus ``extra``."""
    minors: set[int] = set(extra)
    for gate in gates:
        minors.update(m for m in (gate - 1, gate, gate + 1) if 0 <= m <= LATEST)
    return [f"1.{m}" for m in sorted(minors)]


class Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.steps: list[Step] = []

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def add(self, method: str, path: str, version: str | None = None, body: Any = None,
            **kwargs: Any) -> None:
        self.steps.append(Step(method, path, version, body, **kwargs))

    def at(self, versions: list[str], method: str, path: str, body: Any = None,
           **kwargs: Any) -> None:
        for version in versions:
            self.add(method, path, version, body, **kwargs)

    def sample(self, versions: list[str], k: int) -> list[str]:
        return sorted(self.rng.sample(versions, min(k, len(versions))),
                      key=lambda v: int(v.split(".")[1]))


def _root_and_headers(b: Builder) -> None:
    b.at(ALL, "GET", "/")
    b.add("GET", "/")  # no version header
    b.add("GET", "/", token=None)
    for header in ("placement latest", "placement 1.40", "placement 2.0", "placement 0.9",
                   "placement abc", "placement 1.x", "placement 1", "placement 1.5.1",
                   "placement  1.05 ", "compute 1.5", "placement 1.39, compute 1.2",
                   "placement latest, placement 1.2", "", "placement"):
        b.add("GET", "/resource_providers", headers={"OpenStack-API-Version": header})
        b.add("GET", "/", headers={"OpenStack-API-Version": header})
    b.add("GET", "/resource_providers", headers={"X-OpenStack-Placement-API-Version": "1.5"})
    for accept in ("text/plain", "application/xml", "application/json", "*/*", "text/html",
                   "application/json;q=0.1, text/plain", "application/*", ""):
        b.add("GET", "/", "1.39", headers={"Accept": accept})
        b.add("GET", "/resource_providers", "1.39", headers={"Accept": accept})
        b.add("GET", "/nothing", "1.39", headers={"Accept": accept})
    for path in ("/nothing", "/resource_providers/", "/traits/", "/resource_classes/",
                 "//resource_providers", "/resource_providers/x/y/z", "/allocations",
                 "/usages/", "/reshaper/"):
        b.at(["1.0", "1.39"], "GET", path)
    # Wrong methods, at several versions (405 and its Allow header).
    for method, path in (("PATCH", "/resource_providers"), ("DELETE", "/resource_providers"),
                         ("PUT", "/resource_providers"), ("POST", "/"), ("DELETE", "/"),
                         ("POST", "/traits"), ("PATCH", "/traits/CUSTOM_X"),
                         ("POST", "/resource_classes/CUSTOM_X"), ("PUT", "/allocations"),
                         ("GET", "/reshaper"), ("PUT", "/usages"), ("DELETE", "/usages"),
                         ("POST", "/allocation_candidates"),
                         ("POST", "/resource_providers/" + str(uuid.UUID(int=1)))):
        b.at(["1.0", "1.12", "1.30", "1.39"], method, path)
    b.add("OPTIONS", "/resource_providers", "1.39")
    b.add("HEAD", "/", "1.39")


def _resource_classes(b: Builder) -> list[str]:
    b.at(ALL, "GET", "/resource_classes")
    made: list[str] = []
    for version in around(GATES["resource_classes"], 7, 23):
        name = f"CUSTOM_RC_{version.replace('.', '_')}"
        b.add("POST", "/resource_classes", version, {"name": name})
        b.add("GET", f"/resource_classes/{name}", version)
        made.append(name)
    bad: Any
    for bad in ({"name": "NOT_CUSTOM"}, {"name": "CUSTOM_lower"}, {"name": "CUSTOM_"},
                {"name": "CUSTOM_" + "X" * 250}, {}, {"name": 5}, {"name": None},
                {"name": "CUSTOM_OK", "extra": 1}, {"name": "VCPU"}, {"name": made[-1]},
                [], "CUSTOM_A", {"name": "CUSTOM_A B"}, {"name": "CUSTOM_É"}):
        b.at(["1.2", "1.22", "1.23", "1.39"], "POST", "/resource_classes", bad)
    for name in ("VCPU", "MEMORY_MB", made[0], "CUSTOM_NOPE", "nope", "CUSTOM_lower"):
        b.at(around(2, extra=(23, 39)), "GET", f"/resource_classes/{name}")
    # PUT: rename before 1.7, create-or-confirm from 1.7.
    for version in ("1.2", "1.6"):
        b.add("PUT", f"/resource_classes/{made[3]}", version, {"name": f"{made[3]}_R"})
        b.add("PUT", f"/resource_classes/{made[3]}_R", version, {"name": made[3]})
        b.add("PUT", f"/resource_classes/{made[3]}", version, {"name": "VCPU"})
        b.add("PUT", f"/resource_classes/{made[3]}", version, {"name": made[4]})
        b.add("PUT", "/resource_classes/VCPU", version, {"name": "CUSTOM_FROM_VCPU"})
        b.add("PUT", "/resource_classes/CUSTOM_NOPE", version, {"name": "CUSTOM_NOPE2"})
        b.add("PUT", f"/resource_classes/{made[3]}", version, {"name": "bad"})
        b.add("PUT", f"/resource_classes/{made[3]}", version)
    for version in around(7, extra=(23, 39)):
        name = f"CUSTOM_PUT_{version.replace('.', '_')}"
        b.add("PUT", f"/resource_classes/{name}", version)
        b.add("PUT", f"/resource_classes/{name}", version)
        b.add("PUT", f"/resource_classes/{name}", version, {"name": name})
        made.append(name)
    b.at(["1.7", "1.39"], "PUT", "/resource_classes/VCPU")
    b.at(["1.7", "1.39"], "PUT", "/resource_classes/NOT_CUSTOM")
    b.at(["1.7", "1.39"], "PUT", "/resource_classes/CUSTOM_bad")
    b.at(["1.1", "1.2", "1.39"], "DELETE", f"/resource_classes/{made[-1]}")
    b.at(["1.2", "1.39"], "DELETE", "/resource_classes/VCPU")
    b.at(["1.2", "1.39"], "DELETE", "/resource_classes/CUSTOM_NOPE")
    b.at(["1.2", "1.23", "1.39"], "GET", "/resource_classes")
    # Only those created (1.2+) and not deleted.
    return [name for name in made[:-1] if not name.endswith(("_1_0", "_1_1"))]


def _traits(b: Builder) -> list[str]:
    made = []
    for version in around(GATES["traits"], 15, 23):
        name = f"CUSTOM_T_{version.replace('.', '_')}"
        b.add("PUT", f"/traits/{name}", version)
        b.add("PUT", f"/traits/{name}", version)
        b.add("GET", f"/traits/{name}", version)
        made.append(name)
    for name in ("HW_CPU_X86_AVX2", "CUSTOM_NOPE", "NOT_CUSTOM", "CUSTOM_lower", "CUSTOM_",
                 "CUSTOM_" + "X" * 300, "hw_cpu_x86_avx2"):
        b.at(["1.6", "1.23", "1.39"], "PUT", f"/traits/{name}")
        b.at(["1.6", "1.39"], "GET", f"/traits/{name}")
    b.add("PUT", "/traits/CUSTOM_WITH_BODY", "1.39", {"name": "x"})
    for query in ("", "?name=startswith:CUSTOM_", "?name=in:HW_CPU_X86_AVX2,CUSTOM_NOPE",
                  "?name=in:" + made[-1] + "," + made[0], "?associated=true",
                  "?associated=false", "?associated=yes", "?name=bogus:X", "?name=in:",
                  "?name=startswith:", "?other=1", "?name=startswith:HW_CPU_X86_AVX&name=in:X",
                  "?associated=true&name=startswith:CUSTOM_"):
        b.at(around(6, extra=(15, 39)), "GET", "/traits" + query)
    b.at(["1.6", "1.39"], "DELETE", f"/traits/{made[-1]}")
    b.at(["1.6", "1.39"], "DELETE", "/traits/HW_CPU_X86_AVX2")
    b.at(["1.6", "1.39"], "DELETE", "/traits/CUSTOM_NOPE")
    b.at(["1.5", "1.6", "1.39"], "DELETE", "/traits/NOT_CUSTOM")
    return [name for name in made[:-1] if int(name.rsplit("_", 1)[1]) >= 6]


def _providers(b: Builder) -> dict[str, str]:
    """Creates providers at every version; returns the named ones used later."""
    named: dict[str, str] = {}
    for version in ALL:
        u = b.uuid()
        b.add("POST", "/resource_providers", version,
              {"name": f"rp-{version}", "uuid": u})
        b.add("GET", f"/resource_providers/{u}", version)
        named[f"rp-{version}"] = u
    # Server-made uuids (mapped by order of appearance).
    for version in ("1.0", "1.19", "1.20", "1.39"):
        b.add("POST", "/resource_providers", version, {"name": f"auto-{version}"})
    # Trees: two roots, children, a grandchild.
    for name in ("root-a", "root-b", "child-a1", "child-a2", "grand-a1", "child-b1"):
        named[name] = b.uuid()
    parents = {"child-a1": "root-a", "child-a2": "root-a", "grand-a1": "child-a1",
               "child-b1": "root-b"}
    for name in ("root-a", "root-b", "child-a1", "child-a2", "grand-a1", "child-b1"):
        body: dict[str, Any] = {"name": name, "uuid": named[name]}
        if name in parents:
            body["parent_provider_uuid"] = named[parents[name]]
        b.add("POST", "/resource_providers", "1.20" if name != "child-b1" else "1.14", body)
    b.at(["1.13", "1.14"], "POST", "/resource_providers",
         {"name": "with-parent", "uuid": b.uuid(), "parent_provider_uuid": named["root-a"]})
    b.add("POST", "/resource_providers", "1.39",
          {"name": "orphan", "uuid": b.uuid(), "parent_provider_uuid": b.uuid()})
    b.add("POST", "/resource_providers", "1.39",
          {"name": "nullparent", "uuid": b.uuid(), "parent_provider_uuid": None})
    # Bad creates.
    taken = named["rp-1.0"]
    bad_body: Any
    for bad_body in ({"name": "rp-1.0"}, {"name": "dupe-uuid", "uuid": taken}, {"name": ""},
                {"name": "x" * 201}, {"name": "x" * 200, "uuid": b.uuid()}, {},
                {"uuid": b.uuid()}, {"name": 1}, {"name": None}, {"name": "u", "uuid": "nope"},
                {"name": "u2", "uuid": taken.replace("-", "")}, {"name": "u3", "uuid": 7},
                {"name": "e", "extra": True}, [], "name", None, {"name": "sp ace \u00e9"},
                {"name": "p", "parent_provider_uuid": "bad"},
                {"name": "p2", "uuid": taken.upper()}):
        b.at(["1.0", "1.14", "1.20", "1.23", "1.39"], "POST", "/resource_providers", bad_body)
    b.add("POST", "/resource_providers", "1.39", raw_body=b'{"name": ')
    b.add("POST", "/resource_providers", "1.39", raw_body=b'{"name": "a",}')
    b.add("POST", "/resource_providers", "1.39", raw_body=b"")
    b.add("POST", "/resource_providers", "1.39", raw_body=b'{"name": "\\ud800"}')
    b.add("POST", "/resource_providers", "1.39", raw_body=b"\xff\xfe")
    b.add("POST", "/resource_providers", "1.39", raw_body=b'{"name": "a", "name": "b"}')
    for ctype in ("text/plain", "application/xml", "", "application/json; charset=utf-8",
                  "application/json-patch+json", "APPLICATION/JSON"):
        u = b.uuid()
        b.at(["1.0", "1.39"], "POST", "/resource_providers",
             {"name": f"ct-{ctype[:12]}", "uuid": u}, headers={"Content-Type": ctype})
        # Gone again, so that one difference here does not show in every later listing.
        b.add("DELETE", f"/resource_providers/{u}", "1.39")
    b.add("POST", "/resource_providers", "1.39", {"name": "noauth"}, token=None)
    b.add("POST", "/resource_providers", "1.39", {"name": "user-token", "uuid": b.uuid()},
          token="someone")
    # Reads.
    b.at(ALL, "GET", f"/resource_providers/{named['child-a1']}")
    b.at(ALL, "GET", "/resource_providers")
    for bad_id in ("not-a-uuid", named["rp-1.0"].replace("-", ""), named["rp-1.0"].upper(),
                   b.uuid()):
        b.at(["1.0", "1.14", "1.39"], "GET", f"/resource_providers/{bad_id}")
    queries = [
        "name=rp-1.5", f"uuid={named['rp-1.5']}", "uuid=bad", "name=", "unknown=1",
        f"in_tree={named['grand-a1']}", f"in_tree={named['root-b']}", "in_tree=bad",
        f"in_tree={b.uuid()}", "resources=VCPU:1", "resources=VCPU:1,DISK_GB:10",
        "resources=VCPU", "resources=NOPE:1", "resources=VCPU:0", "resources=VCPU:-1",
        "resources=", "member_of=in:" + b.uuid(), "member_of=bad", "member_of=" + b.uuid(),
        "member_of=!" + b.uuid(), "required=HW_CPU_X86_AVX2", "required=!HW_CPU_X86_AVX2",
        "required=CUSTOM_NOPE", "required=", "required=in:HW_CPU_X86_AVX2,HW_CPU_X86_SSE",
        "name=rp-1.5&uuid=" + named["rp-1.5"], "name=root-a&name=root-b",
        # Percent-escapes that are not UTF-8, and one that is.
        "name=%FF%FE", "name=%C3%A9", "required=%FF",
    ]
    for query in queries:
        b.at([*b.sample(ALL, 6), "1.39"], "GET", "/resource_providers?" + query)
    # Updates.
    target = named["rp-1.1"]
    for version in around(14, 37, extra=(0, 20, 39)):
        b.add("PUT", f"/resource_providers/{target}", version, {"name": f"renamed-{version}"})
    b.add("PUT", f"/resource_providers/{target}", "1.39", {"name": "rp-1.2"})
    for bad in ({}, {"name": ""}, {"name": 3}, {"uuid": b.uuid(), "name": "x"},
                {"name": "y", "extra": 1}, {"name": "z", "parent_provider_uuid": "bad"}):
        b.at(["1.0", "1.14", "1.39"], "PUT", f"/resource_providers/{target}", bad)
    b.at(["1.0", "1.39"], "PUT", f"/resource_providers/{b.uuid()}", {"name": "ghost"})
    # Reparenting: set a parent, change it (1.37+), un-parent (1.37+), loops.
    child = named["child-a2"]
    for version in ("1.14", "1.36", "1.37", "1.39"):
        b.add("PUT", f"/resource_providers/{named['rp-1.3']}", version,
              {"name": "rp-1.3", "parent_provider_uuid": named["root-b"]})
        b.add("PUT", f"/resource_providers/{child}", version,
              {"name": "child-a2", "parent_provider_uuid": named["root-b"]})
        b.add("PUT", f"/resource_providers/{child}", version,
              {"name": "child-a2", "parent_provider_uuid": None})
        b.add("PUT", f"/resource_providers/{child}", version,
              {"name": "child-a2", "parent_provider_uuid": named["root-a"]})
        b.add("PUT", f"/resource_providers/{named['root-a']}", version,
              {"name": "root-a", "parent_provider_uuid": named["grand-a1"]})
        b.add("PUT", f"/resource_providers/{named['root-a']}", version,
              {"name": "root-a", "parent_provider_uuid": named["root-a"]})
        b.add("PUT", f"/resource_providers/{child}", version,
              {"name": "child-a2", "parent_provider_uuid": b.uuid()})
    b.add("GET", f"/resource_providers?in_tree={named['root-a']}", "1.39")
    b.add("GET", f"/resource_providers?in_tree={named['root-b']}", "1.39")
    # Deletes.
    for version in ("1.0", "1.39"):
        b.add("DELETE", f"/resource_providers/{named['root-a']}", version)
        b.add("DELETE", f"/resource_providers/{b.uuid()}", version)
        b.add("DELETE", "/resource_providers/not-a-uuid", version)
    b.add("DELETE", f"/resource_providers/{named['rp-1.38']}", "1.38")
    b.add("GET", f"/resource_providers/{named['rp-1.38']}", "1.38")
    return named


def _inventories(b: Builder, rp: dict[str, str], classes: list[str]) -> None:
    custom = classes[0]
    for version in around(5, 15, 26, extra=(0, 3, 19, 23, 39)):
        u = rp[f"rp-{version}"]
        base = f"/resource_providers/{u}/inventories"
        b.add("GET", base, version)
        b.add("PUT", base, version, {
            "resource_provider_generation": f"$GEN{{{u}}}",
            "inventories": {
                "VCPU": {"total": 8, "allocation_ratio": 4.0, "reserved": 1},
                "MEMORY_MB": {"total": 4096, "min_unit": 64, "max_unit": 2048,
                              "step_size": 64},
                "DISK_GB": {"total": 100, "reserved": 100},
            }})
        b.add("PUT", base, version, {
            "resource_provider_generation": f"$GEN{{{u}}}",
            "inventories": {
                "VCPU": {"total": 8, "allocation_ratio": 4.0, "reserved": 1},
                "MEMORY_MB": {"total": 4096, "min_unit": 64, "max_unit": 2048,
                              "step_size": 64},
                "DISK_GB": {"total": 100, "reserved": 10},
            }})
        b.add("GET", base, version)
        b.add("POST", base, version, {"resource_provider_generation": f"$GEN{{{u}}}",
                                      "resource_class": custom, "total": 5})
        b.add("POST", base, version, {"resource_provider_generation": f"$GEN{{{u}}}",
                                      "resource_class": custom, "total": 5})
        b.add("GET", f"{base}/{custom}", version)
        b.add("PUT", f"{base}/{custom}", version,
              {"resource_provider_generation": f"$GEN{{{u}}}", "total": 7, "reserved": 7})
        b.add("PUT", f"{base}/{custom}", version,
              {"resource_provider_generation": f"$GEN{{{u}}}", "total": 7, "reserved": 1})
        b.add("PUT", f"{base}/{custom}", version,
              {"resource_provider_generation": 999, "total": 7})
        b.add("PUT", f"{base}/SRIOV_NET_VF", version,
              {"resource_provider_generation": f"$GEN{{{u}}}", "total": 7})
        b.add("GET", f"{base}/SRIOV_NET_VF", version)
        b.add("GET", f"{base}/CUSTOM_NOPE", version)
        b.add("DELETE", f"{base}/{custom}", version)
        b.add("DELETE", f"{base}/{custom}", version)
        b.add("DELETE", f"{base}/NOPE", version)
        b.add("GET", f"/resource_providers/{u}", version)
        if version in ("1.0", "1.4", "1.5", "1.39"):
            b.add("DELETE", base, version)
            b.add("GET", base, version)
    # Bad bodies on one provider.
    u = rp["rp-1.39"]
    base = f"/resource_providers/{u}/inventories"
    g = f"$GEN{{{u}}}"
    bad_puts: list[Any] = [
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 0}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": -1}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": "8"}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8,
                                                                       "min_unit": 4,
                                                                       "max_unit": 2}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8,
                                                                       "reserved": 9}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8,
                                                                       "step_size": 0}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {
            "total": 8, "allocation_ratio": -1}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {
            "total": 8, "allocation_ratio": 0}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8,
                                                                       "extra": 1}}},
        {"resource_provider_generation": g, "inventories": {"CUSTOM_NOPE": {"total": 8}}},
        {"resource_provider_generation": g, "inventories": {"bad name": {"total": 8}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 2147483648}}},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8.5}}},
        {"resource_provider_generation": g, "inventories": []},
        {"resource_provider_generation": g},
        {"inventories": {"VCPU": {"total": 8}}},
        {"resource_provider_generation": "x", "inventories": {}},
        {"resource_provider_generation": 99, "inventories": {"VCPU": {"total": 8}}},
        {"resource_provider_generation": g, "inventories": {}, "extra": 1},
        {"resource_provider_generation": g, "inventories": {"VCPU": {"total": 8,
                                                                       "reserved": 8}}},
    ]
    for body in bad_puts:
        b.at(["1.0", "1.23", "1.25", "1.26", "1.39"], "PUT", base, body)
    for body in ({"resource_provider_generation": g, "total": 8},
                 {"resource_provider_generation": g, "resource_class": "VCPU"},
                 {"resource_provider_generation": g, "resource_class": "CUSTOM_NOPE",
                  "total": 1},
                 {"resource_provider_generation": 77, "resource_class": "VGPU", "total": 1},
                 {"resource_class": "VGPU", "total": 1}):
        b.at(["1.0", "1.39"], "POST", base, body)
    b.add("PUT", base, "1.39", raw_body=b"{bad json")
    b.add("PUT", base, "1.39", {"resource_provider_generation": g, "inventories": {}},
          headers={"Content-Type": "text/plain"})
    b.add("PUT", f"{base}/VCPU", "1.39", {"total": 1})
    b.add("PUT", f"{base}/VCPU", "1.39", {"resource_provider_generation": g, "total": 1,
                                          "resource_class": "VCPU"})
    ghost = b.uuid()
    b.at(["1.0", "1.39"], "GET", f"/resource_providers/{ghost}/inventories")
    b.at(["1.0", "1.39"], "PUT", f"/resource_providers/{ghost}/inventories",
         {"resource_provider_generation": 0, "inventories": {}})
    b.at(["1.0", "1.39"], "GET", "/resource_providers/bad/inventories")
    b.at(["1.4", "1.5", "1.39"], "DELETE", f"/resource_providers/{ghost}/inventories")
    b.at(["1.39"], "PATCH", base)


def _aggregates(b: Builder, rp: dict[str, str]) -> list[str]:
    aggs = [b.uuid() for _ in range(4)]
    for version in around(1, 19, extra=(0, 23, 39)):
        u = rp[f"rp-{version}"]
        path = f"/resource_providers/{u}/aggregates"
        b.add("GET", path, version)
        b.add("PUT", path, version, aggs[:2])
        b.add("PUT", path, version, {"aggregates": aggs[1:3],
                                     "resource_provider_generation": f"$GEN{{{u}}}"})
        b.add("PUT", path, version, {"aggregates": aggs[1:3],
                                     "resource_provider_generation": 1234})
        b.add("PUT", path, version, {"aggregates": aggs[:1]})
        b.add("PUT", path, version, ["bad"])
        b.add("PUT", path, version, [aggs[0], aggs[0]])
        b.add("PUT", path, version, {"aggregates": ["bad"],
                                     "resource_provider_generation": f"$GEN{{{u}}}"})
        b.add("PUT", path, version, {"aggregates": [],
                                     "resource_provider_generation": f"$GEN{{{u}}}",
                                     "extra": 1})
        b.add("GET", path, version)
    for name in ("root-b", "child-b1", "rp-1.10", "rp-1.24"):
        u = rp[name]
        b.add("PUT", f"/resource_providers/{u}/aggregates", "1.39",
              {"aggregates": aggs[2:4], "resource_provider_generation": f"$GEN{{{u}}}"})
    ghost = b.uuid()
    b.at(["1.1", "1.39"], "GET", f"/resource_providers/{ghost}/aggregates")
    b.at(["1.1", "1.39"], "PUT", f"/resource_providers/{ghost}/aggregates",
         {"aggregates": [], "resource_provider_generation": 0})
    return aggs


def _provider_traits(b: Builder, rp: dict[str, str], traits: list[str]) -> None:
    for version in around(6, extra=(15, 23, 39)):
        u = rp[f"rp-{version}"]
        path = f"/resource_providers/{u}/traits"
        g = f"$GEN{{{u}}}"
        b.add("GET", path, version)
        b.add("PUT", path, version, {"traits": ["HW_CPU_X86_AVX2", traits[0]],
                                     "resource_provider_generation": g})
        b.add("PUT", path, version, {"traits": ["HW_CPU_X86_AVX2"],
                                     "resource_provider_generation": 4321})
        b.add("PUT", path, version, {"traits": ["CUSTOM_NOPE"],
                                     "resource_provider_generation": g})
        b.add("PUT", path, version, {"traits": ["HW_CPU_X86_AVX2", "HW_CPU_X86_AVX2"],
                                     "resource_provider_generation": g})
        b.add("PUT", path, version, {"traits": ["HW_CPU_X86_AVX2"]})
        b.add("PUT", path, version, {"traits": "HW_CPU_X86_AVX2",
                                     "resource_provider_generation": g})
        b.add("PUT", path, version, {"traits": ["bad name"],
                                     "resource_provider_generation": g})
        b.add("GET", path, version)
        b.add("GET", f"/resource_providers/{u}", version)
    for name in ("root-b", "rp-1.10", "rp-1.22", "grand-a1"):
        u = rp[name]
        b.add("PUT", f"/resource_providers/{u}/traits", "1.39",
              {"traits": ["HW_CPU_X86_AVX2", "HW_CPU_X86_SSE"],
               "resource_provider_generation": f"$GEN{{{u}}}"})
    u = rp["rp-1.7"]
    b.at(["1.5", "1.6", "1.39"], "DELETE", f"/resource_providers/{u}/traits")
    b.at(["1.6", "1.39"], "DELETE", f"/resource_providers/{b.uuid()}/traits")
    b.at(["1.6", "1.39"], "GET", f"/resource_providers/{b.uuid()}/traits")
    b.at(["1.6", "1.39"], "DELETE", f"/traits/{traits[0]}")  # in use: 409
    b.at(["1.6", "1.39"], "GET", "/traits?associated=true")


def _nested_inventory(b: Builder, rp: dict[str, str]) -> None:
    """Inventory on the trees, for candidates and allocations."""
    shapes = {
        "root-b": {"DISK_GB": {"total": 500}},
        "child-b1": {"VCPU": {"total": 16}, "MEMORY_MB": {"total": 16384},
                     "SRIOV_NET_VF": {"total": 4}},
        "grand-a1": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 4096}},
        "child-a1": {"DISK_GB": {"total": 50}},
        "rp-1.10": {"VCPU": {"total": 32}, "MEMORY_MB": {"total": 65536},
                    "DISK_GB": {"total": 1000}},
        "rp-1.22": {"VCPU": {"total": 2}, "MEMORY_MB": {"total": 2048}},
        "rp-1.24": {"DISK_GB": {"total": 2000}},
        "rp-1.2": {"VGPU": {"total": 1}},
    }
    for name, inventories in shapes.items():
        u = rp[name]
        b.add("PUT", f"/resource_providers/{u}/inventories", "1.39",
              {"resource_provider_generation": f"$GEN{{{u}}}", "inventories": inventories})


def _claim_replace_move(b: Builder, version: str, big: str, small: str, project: str,
                        user: str) -> str:
    """A new consumer's claim at ``version``, then (1.12+) its replacement over two
    providers, its move to one and (1.28+) stale generations; the usages after."""
    c = b.uuid()
    minor = int(version.split(".")[1])
    path = f"/allocations/{c}"
    if minor < 12:
        body: Any = {"allocations": [{"resource_provider": {"uuid": big},
                                      "resources": {"VCPU": 1, "MEMORY_MB": 256}}]}
    else:
        body = {"allocations": {big: {"resources": {"VCPU": 1, "MEMORY_MB": 256}}}}
    if minor >= 8:
        body.update(project_id=project, user_id=user)
    if minor >= 28:
        body["consumer_generation"] = None
    if minor >= 38:
        body["consumer_type"] = "INSTANCE"
    b.add("PUT", path, version, body)
    b.add("GET", path, version)
    b.add("GET", f"/resource_providers/{big}/allocations", version)
    b.add("GET", f"/resource_providers/{big}", version)
    b.add("GET", f"/resource_providers/{big}/usages", version)
    # Replace it, spread over two providers.
    if minor >= 12:
        body2: Any = {"allocations": {big: {"resources": {"VCPU": 2}},
                                      small: {"resources": {"MEMORY_MB": 512}}}}
        body2.update(project_id=project, user_id=user)
        if minor >= 28:
            body2["consumer_generation"] = f"$CGEN{{{c}}}"
        if minor >= 38:
            body2["consumer_type"] = "MIGRATION"
        b.add("PUT", path, version, body2)
        b.add("GET", f"/resource_providers/{small}", version)
        b.add("GET", f"/resource_providers/{big}", version)
        b.add("GET", path, version)
        # Move all of it to one provider: the other one is left.
        body3 = dict(body2, allocations={small: {"resources": {"VCPU": 1}}})
        if minor >= 28:
            body3["consumer_generation"] = f"$CGEN{{{c}}}"
        b.add("PUT", path, version, body3)
        b.add("GET", f"/resource_providers/{small}", version)
        b.add("GET", f"/resource_providers/{big}", version)
        # Stale consumer generation.
        if minor >= 28:
            b.add("PUT", path, version, dict(body2, consumer_generation=99))
            b.add("PUT", path, version, dict(body2, consumer_generation=None))
    b.add("GET", "/usages?project_id=" + project, version)
    b.add("GET", f"/usages?project_id={project}&user_id={user}", version)
    if minor >= 38:
        b.add("GET", f"/usages?project_id={project}&consumer_type=INSTANCE", version)
        b.add("GET", f"/usages?project_id={project}&consumer_type=all", version)
        b.add("GET", f"/usages?project_id={project}&consumer_type=unknown", version)
        b.add("GET", f"/usages?project_id={project}&consumer_type=bad%20type", version)
    return c


def _allocations(b: Builder, rp: dict[str, str], classes: list[str]) -> list[str]:
    project, user = b.uuid(), b.uuid()
    big = rp["rp-1.10"]
    small = rp["rp-1.22"]
    consumers = [_claim_replace_move(b, version, big, small, project, user)
                 for version in around(8, 12, 13, 28, 38, extra=(0, 11, 15, 23, 39))]
    # An empty PUT for a consumer never seen: does it leave a consumer behind?
    # (Upstream does: a known difference.) On a provider and project of its
    # own, removed afterwards, so that the difference cannot spread to later
    # answers (usages, generations, candidates).
    ghost_host = b.uuid()
    ghost_project, ghost_user = b.uuid(), b.uuid()
    b.add("POST", "/resource_providers", "1.20", {"name": "ghost-host", "uuid": ghost_host})
    b.add("PUT", f"/resource_providers/{ghost_host}/inventories", "1.39",
          {"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}})
    for version in ("1.28", "1.38"):
        ghost_consumer = b.uuid()
        empty: dict[str, Any] = {"allocations": {}, "project_id": ghost_project,
                                 "user_id": ghost_user, "consumer_generation": None}
        b.add("PUT", f"/allocations/{ghost_consumer}", version, empty)
        b.add("GET", f"/allocations/{ghost_consumer}", version)
        b.add("PUT", f"/allocations/{ghost_consumer}", version,
              dict(empty, allocations={ghost_host: {"resources": {"VCPU": 1}}}))
        b.add("DELETE", f"/allocations/{ghost_consumer}", version)
    b.add("DELETE", f"/resource_providers/{ghost_host}", "1.39")
    # Bad allocation bodies.
    c = b.uuid()
    path = f"/allocations/{c}"
    good = {"allocations": {big: {"resources": {"VCPU": 1}}}, "project_id": project,
            "user_id": user, "consumer_generation": None}
    bads: list[Any] = [
        dict(good, allocations={big: {"resources": {"VCPU": 0}}}),
        dict(good, allocations={big: {"resources": {"VCPU": -1}}}),
        dict(good, allocations={big: {"resources": {"VCPU": 1000}}}),
        dict(good, allocations={big: {"resources": {"VGPU": 1}}}),
        dict(good, allocations={big: {"resources": {"CUSTOM_NOPE": 1}}}),
        dict(good, allocations={big: {"resources": {}}}),
        dict(good, allocations={big: {}}),
        dict(good, allocations={}),
        dict(good, allocations={"bad": {"resources": {"VCPU": 1}}}),
        dict(good, allocations={b.uuid(): {"resources": {"VCPU": 1}}}),
        dict(good, allocations={big: {"resources": {"VCPU": "1"}}}),
        dict(good, allocations={big: {"resources": {"VCPU": 1}, "generation": 0}}),
        dict(good, project_id=""), dict(good, project_id=5), dict(good, user_id=None),
        {"allocations": {big: {"resources": {"VCPU": 1}}}, "project_id": project,
         "user_id": user},
        {"allocations": {big: {"resources": {"VCPU": 1}}}, "consumer_generation": None},
        dict(good, consumer_generation=3), dict(good, consumer_generation="x"),
        dict(good, consumer_type="bad type"), dict(good, consumer_type=""),
        dict(good, extra=1), dict(good, mappings={}),
        dict(good, allocations={big: {"resources": {"VCPU": 1, "MEMORY_MB": 3}}}),
        dict(good, allocations={small: {"resources": {"MEMORY_MB": 2049}}}),
        [], None,
    ]
    # A consumer of its own for each: upstream leaves the consumer of a
    # refused claim behind (a known difference), which would change the
    # answers to every later claim of the same consumer.
    for body in bads:
        for version in ("1.12", "1.28", "1.38", "1.39"):
            b.add("PUT", f"/allocations/{b.uuid()}", version, body)
    b.at(["1.0", "1.8"], "PUT", path, {"allocations": []})
    b.at(["1.0", "1.8"], "PUT", path, {"allocations": [{"resource_provider": {"uuid": big},
                                                         "resources": {}}]})
    b.add("PUT", path, "1.39", raw_body=b'{"allocations": {')
    b.at(["1.0", "1.39"], "PUT", "/allocations/not-a-uuid", good)
    b.at(["1.0", "1.28", "1.39"], "GET", f"/allocations/{b.uuid()}")
    b.at(["1.0", "1.39"], "GET", "/allocations/not-a-uuid")
    b.at(["1.0", "1.39"], "GET", f"/resource_providers/{b.uuid()}/allocations")
    b.at(["1.8", "1.9", "1.39"], "GET", "/usages")
    b.at(["1.9", "1.39"], "GET", "/usages?user_id=" + user)
    b.at(["1.9", "1.39"], "GET", "/usages?project_id=" + project + "&bogus=1")
    b.at(["1.9", "1.39"], "GET", f"/resource_providers/{b.uuid()}/usages")
    # POST /allocations (1.13+): several consumers at once.
    c1, c2, c3 = b.uuid(), b.uuid(), b.uuid()
    for version in ("1.12", "1.13", "1.27", "1.28", "1.37", "1.38", "1.39"):
        minor = int(version.split(".")[1])
        entry: dict[str, Any] = {"allocations": {big: {"resources": {"DISK_GB": 5}}},
                                 "project_id": project, "user_id": user}
        if minor >= 28:
            entry["consumer_generation"] = None
        if minor >= 38:
            entry["consumer_type"] = "INSTANCE"
        cc = b.uuid()
        b.add("POST", "/allocations", version, {cc: entry, c1: dict(entry)})
        b.add("GET", f"/allocations/{cc}", version)
    b.add("POST", "/allocations", "1.39", {c2: {"allocations": {}, "project_id": project,
                                                "user_id": user, "consumer_generation": None}})
    b.add("POST", "/allocations", "1.39", {c1: {"allocations": {}, "project_id": project,
                                                "user_id": user,
                                                "consumer_generation": f"$CGEN{{{c1}}}"}})
    b.add("POST", "/allocations", "1.39", {"bad": {}})
    b.add("POST", "/allocations", "1.39", {})
    b.add("POST", "/allocations", "1.39", [])
    b.add("POST", "/allocations", "1.39", {c3: {"allocations": {
        big: {"resources": {"VCPU": 10000}}}, "project_id": project, "user_id": user,
        "consumer_generation": None}})
    b.add("POST", "/allocations", "1.39", {c3: {"allocations": {
        big: {"resources": {"VCPU": 1}}}, "project_id": project, "user_id": user,
        "consumer_generation": 5}})
    b.add("POST", "/allocations", "1.39", raw_body=b"[}")
    # Deletes.
    for version, consumer in zip(("1.0", "1.28", "1.39"), consumers[:3], strict=True):
        b.add("DELETE", f"/allocations/{consumer}", version)
        b.add("DELETE", f"/allocations/{consumer}", version)
        b.add("GET", f"/allocations/{consumer}", version)
    b.add("DELETE", "/allocations/not-a-uuid", "1.39")
    # In use: provider, inventory, resource class with allocations.
    b.at(["1.0", "1.39"], "DELETE", f"/resource_providers/{big}")
    b.at(["1.0", "1.39"], "DELETE", f"/resource_providers/{big}/inventories/VCPU")
    b.at(["1.5", "1.39"], "DELETE", f"/resource_providers/{big}/inventories")
    b.add("PUT", f"/resource_providers/{big}/inventories", "1.39",
          {"resource_provider_generation": f"$GEN{{{big}}}",
           "inventories": {"VCPU": {"total": 1}}})
    b.add("PUT", f"/resource_providers/{big}/inventories/VCPU", "1.39",
          {"resource_provider_generation": f"$GEN{{{big}}}", "total": 1})
    # A custom class in use.
    b.add("PUT", f"/resource_providers/{small}/inventories/{classes[0]}", "1.39",
          {"resource_provider_generation": f"$GEN{{{small}}}", "total": 3})
    cc = b.uuid()
    b.add("PUT", f"/allocations/{cc}", "1.39",
          {"allocations": {small: {"resources": {classes[0]: 1}}}, "project_id": project,
           "user_id": user, "consumer_generation": None})
    b.at(["1.2", "1.39"], "DELETE", f"/resource_classes/{classes[0]}")
    b.add("GET", f"/resource_providers/{small}/usages", "1.39")
    b.add("GET", "/usages?project_id=" + project, "1.39")
    return consumers


def _candidates(b: Builder, rp: dict[str, str], aggs: list[str]) -> None:
    shapes = [
        "resources=VCPU:1",
        "resources=VCPU:1,MEMORY_MB:512",
        "resources=VCPU:1,MEMORY_MB:512,DISK_GB:10",
        "resources=DISK_GB:10",
        "resources=VCPU:1000",
        "resources=VGPU:1",
        "resources=SRIOV_NET_VF:1",
        "resources=VCPU:1&limit=1",
        "resources=VCPU:1&limit=0",
        "resources=VCPU:1&limit=x",
        "resources=VCPU:1&required=HW_CPU_X86_AVX2",
        "resources=VCPU:1&required=!HW_CPU_X86_AVX2",
        "resources=VCPU:1&required=HW_CPU_X86_AVX2,!HW_CPU_X86_SSE",
        "resources=VCPU:1&required=in:HW_CPU_X86_AVX2,HW_CPU_X86_SSE",
        "resources=VCPU:1&required=CUSTOM_NOPE",
        "resources=VCPU:1&required=bad",
        f"resources=VCPU:1&member_of={aggs[2]}",
        f"resources=VCPU:1&member_of=in:{aggs[2]},{aggs[1]}",
        f"resources=VCPU:1&member_of=!{aggs[2]}",
        f"resources=VCPU:1&member_of=!in:{aggs[2]},{aggs[1]}",
        f"resources=VCPU:1&member_of={aggs[2]}&member_of={aggs[3]}",
        "resources=VCPU:1&member_of=bad",
        f"resources=VCPU:1&in_tree={rp['root-b']}",
        f"resources=VCPU:1&in_tree={rp['child-b1']}",
        "resources=VCPU:1&in_tree=bad",
        "resources=VCPU:1,DISK_GB:10&group_policy=isolate",
        "resources1=VCPU:1&resources2=MEMORY_MB:512&group_policy=isolate",
        "resources1=VCPU:1&resources2=MEMORY_MB:512&group_policy=none",
        "resources1=VCPU:1&resources2=MEMORY_MB:512",
        "resources1=VCPU:1&resources2=VCPU:1&group_policy=isolate",
        "resources=DISK_GB:10&resources1=VCPU:1&required1=HW_CPU_X86_AVX2&group_policy=none",
        "resources_ABC=VCPU:1&group_policy=none",
        "resources_abc=VCPU:1&required_abc=HW_CPU_X86_AVX2&group_policy=none",
        "resources1=VCPU:1&member_of1=" + aggs[2] + "&group_policy=none",
        "resources1=VCPU:1&in_tree1=" + rp["root-b"] + "&group_policy=none",
        "resources1=VCPU:1&resources2=DISK_GB:1&same_subtree=_1,_2&group_policy=none",
        "resources_a=VCPU:1&resources_b=SRIOV_NET_VF:1&same_subtree=_a,_b&group_policy=none",
        "resources_a=VCPU:1&required_c=HW_CPU_X86_AVX2&same_subtree=_a,_c&group_policy=none",
        "resources_a=VCPU:1&same_subtree=_a,_z&group_policy=none",
        "resources=VCPU:1&root_required=HW_CPU_X86_AVX2",
        "resources=VCPU:1&root_required=!HW_CPU_X86_AVX2",
        "resources=VCPU:1&root_required=in:HW_CPU_X86_AVX2",
        "resources1=VCPU:1",
        "required=HW_CPU_X86_AVX2",
        "",
        "resources=",
        "resources=VCPU",
        "resources=VCPU:0",
        "resources=NOPE:1",
        "resources=VCPU:1&bogus=1",
        "resources=VCPU:1&group_policy=bad",
        "resources=VCPU:1&resources=DISK_GB:1",
        "resources=VCPU:1&required=HW_CPU_X86_AVX2&required=HW_CPU_X86_SSE",
        "resources=VCPU:1,VCPU:2",
        "resources=VCPU:1&limit=2&required=!CUSTOM_NOPE",
    ]
    gates = (10, 16, 17, 21, 22, 24, 25, 29, 31, 32, 33, 34, 35, 36, 39)
    versions = around(*gates, extra=(0, LATEST))
    for query in shapes:
        chosen = [*b.sample(versions, 8), "1.9", "1.10", "1.39"]
        for version in sorted(set(chosen), key=lambda v: int(v.split(".")[1])):
            b.add("GET", "/allocation_candidates?" + query, version)


def _reshaper(b: Builder, rp: dict[str, str]) -> None:
    """Reshapes; policy wants the service role (noauth2 takes roles from X-Roles)."""
    project, user = b.uuid(), b.uuid()
    service = {"X-Roles": "admin,service"}
    parent = b.uuid()
    kid = b.uuid()
    b.add("POST", "/resource_providers", "1.39", {"name": "reshape-root", "uuid": parent})
    b.add("POST", "/resource_providers", "1.39",
          {"name": "reshape-kid", "uuid": kid, "parent_provider_uuid": parent})
    b.add("PUT", f"/resource_providers/{parent}/inventories", "1.39",
          {"resource_provider_generation": f"$GEN{{{parent}}}",
           "inventories": {"VGPU": {"total": 4}}})
    consumer = b.uuid()
    b.add("PUT", f"/allocations/{consumer}", "1.39",
          {"allocations": {parent: {"resources": {"VGPU": 2}}}, "project_id": project,
           "user_id": user, "consumer_generation": None})
    moved = {
        "inventories": {
            parent: {"resource_provider_generation": f"$GEN{{{parent}}}", "inventories": {}},
            kid: {"resource_provider_generation": f"$GEN{{{kid}}}",
                  "inventories": {"VGPU": {"total": 4}}},
        },
        "allocations": {
            consumer: {"allocations": {kid: {"resources": {"VGPU": 2}}},
                       "project_id": project, "user_id": user,
                       "consumer_generation": f"$CGEN{{{consumer}}}"},
        },
    }
    reshape: Any
    for reshape in (
        dict(moved, allocations={}),  # leaves allocations where inventory goes: 409
        {"inventories": {}},
        {"allocations": {}},
        dict(moved, extra=1),
        dict(moved, inventories={"bad": {}}),
        dict(moved, inventories={b.uuid(): {"resource_provider_generation": 0,
                                            "inventories": {}}}),
        dict(moved, inventories={parent: {"resource_provider_generation": 99,
                                          "inventories": {}}}),
        dict(moved, allocations={consumer: {"allocations": {}, "project_id": project,
                                            "user_id": user, "consumer_generation": 42}}),
        {"inventories": {}, "allocations": {}},
    ):
        b.at(["1.30", "1.34", "1.38", "1.39"], "POST", "/reshaper", reshape, headers=service)
    b.add("POST", "/reshaper", "1.39", {"inventories": {}, "allocations": {}})  # admin only
    b.at(["1.29"], "POST", "/reshaper", moved, headers=service)
    b.add("POST", "/reshaper", "1.30", moved, headers=service)
    b.add("GET", f"/resource_providers/{kid}/inventories", "1.39")
    b.add("GET", f"/resource_providers/{parent}/inventories", "1.39")
    b.add("GET", f"/allocations/{consumer}", "1.39")
    b.add("POST", "/reshaper", "1.39", moved, headers=service)  # again: now stale
    b.add("POST", "/reshaper", "1.39", raw_body=b"{", headers=service)


def _summary(b: Builder, rp: dict[str, str]) -> None:
    for version in ("1.0", "1.14", "1.39"):
        b.add("GET", "/resource_providers", version)
    for version in ("1.6", "1.39"):
        b.add("GET", "/traits?associated=true", version)
    b.add("GET", "/resource_classes", "1.39")


def build(seed: int = 20260101) -> list[Step]:
    """The whole sequence for one seed."""
    b = Builder(seed)
    _root_and_headers(b)
    classes = _resource_classes(b)
    traits = _traits(b)
    rp = _providers(b)
    _inventories(b, rp, classes)
    aggs = _aggregates(b, rp)
    _provider_traits(b, rp, traits)
    _nested_inventory(b, rp)
    _allocations(b, rp, classes)
    _candidates(b, rp, aggs)
    _reshaper(b, rp)
    _summary(b, rp)
    return b.steps
