"""Property test: on small random clouds, the candidates are exactly upstream's.

A brute-force reference (below, written from upstream's documented rules,
sharing no code with the engine) enumerates every combination per anchor
tree; the service must return the same allocation requests (and mappings),
and every one of them must be claimable with PUT /allocations as returned.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from unittest import mock
from urllib.parse import urlencode

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from allotment.candidates import engine, plan
from allotment.candidates import explain as diagnosis
from allotment.candidates.model import load
from allotment.candidates.request import Settings
from allotment.candidates.sources import ModelSource
from allotment.candidates.trace import Trace
from allotment.http.candidates_query import parse_request
from allotment.http.microversion import Version
from allotment.http.request import Query as HttpQuery
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.candidates_cloud import SHARES, Cloud
from tests.support.client import PlacementClient

CLASSES = ["VCPU", "DISK_GB", "VGPU"]
TRAITS = ["CUSTOM_A", "CUSTOM_B"]
AGGS = ["agg1", "agg2"]


@dataclass
class Model:
    name: str
    parent: str | None
    inventory: dict[str, dict]
    traits: set[str]
    aggs: set[str]
    used: dict[str, int] = field(default_factory=dict)


@dataclass
class Group:
    suffix: str
    resources: dict[str, int]
    required: list[set[str]] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)
    member_of: list[set[str]] = field(default_factory=list)
    forbidden_aggs: set[str] = field(default_factory=set)
    in_tree: str | None = None


@dataclass
class Query:
    version: str
    groups: list[Group]
    group_policy: str | None = None
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    same_subtrees: list[set[str]] = field(default_factory=list)


# --- the reference --------------------------------------------------------------

class Reference:
    def __init__(self, providers: list[Model]) -> None:
        self.by_name = {p.name: p for p in providers}

    def root(self, name: str) -> str:
        while self.by_name[name].parent:
            name = self.by_name[name].parent
        return name

    def ancestors(self, name: str) -> set[str]:
        found = {name}
        while self.by_name[name].parent:
            name = self.by_name[name].parent
            found.add(name)
        return found

    def capacity(self, p: Model, rc: str) -> int:
        inv = p.inventory[rc]
        return int((inv["total"] - inv.get("reserved", 0)) * inv.get("allocation_ratio", 1.0))

    def fits(self, p: Model, rc: str, amount: int) -> bool:
        inv = p.inventory.get(rc)
        if inv is None:
            return False
        return (p.used.get(rc, 0) + amount <= self.capacity(p, rc)
                and inv.get("min_unit", 1) <= amount <= inv.get("max_unit", inv["total"])
                and amount % inv.get("step_size", 1) == 0)

    def room(self, p: Model, rc: str) -> int:
        inv = p.inventory[rc]
        return min(self.capacity(p, rc) - p.used.get(rc, 0), inv.get("max_unit", inv["total"]))

    def anchors(self, p: Model) -> set[str]:
        if SHARES not in p.traits:
            return set()
        return {self.root(q.name) for q in self.by_name.values() if q.aggs & p.aggs}

    def granular_options(self, g: Group, anchor: str) -> list[str]:
        if not g.resources and not (g.required or g.member_of):
            return []
        found = []
        for p in self.by_name.values():
            if not all(self.fits(p, rc, a) for rc, a in g.resources.items()):
                continue
            if not all(p.traits & s for s in g.required) or p.traits & g.forbidden:
                continue
            if not all(p.aggs & s for s in g.member_of) or p.aggs & g.forbidden_aggs:
                continue
            if g.resources and g.in_tree and self.root(p.name) != self.root(g.in_tree):
                continue
            if self.root(p.name) == anchor or anchor in self.anchors(p):
                found.append(p.name)
        return found

    def unsuffixed_options(self, g: Group, rc: str, amount: int, anchor: str) -> list[str]:
        found = []
        for p in self.by_name.values():
            if not self.fits(p, rc, amount) or p.traits & g.forbidden or p.aggs & g.forbidden_aggs:
                continue
            root = self.by_name[self.root(p.name)]
            local = (root.name == anchor
                     and (not g.in_tree or root.name == self.root(g.in_tree))
                     and (not g.member_of or all(p.aggs & s for s in g.member_of)
                          or all(root.aggs & s for s in g.member_of))
                     and not root.aggs & g.forbidden_aggs)
            sharing = (g.in_tree is None and anchor in self.anchors(p)
                       and (not g.member_of or all(p.aggs & s for s in g.member_of))
                       and not self.by_name[anchor].aggs & g.forbidden_aggs)
            if local or sharing:
                found.append(p.name)
        return found

    def candidates(self, q: Query) -> Counter:
        nested_aware = q.version >= "1.29"
        found = set()
        for anchor in [p.name for p in self.by_name.values() if p.parent is None]:
            root = self.by_name[anchor]
            if q.root_required - root.traits or q.root_forbidden & root.traits:
                continue
            slots = []  # (group, class or None, options)
            for g in q.groups:
                if g.suffix:
                    slots.append((g, None, self.granular_options(g, anchor)))
                else:
                    for rc, amount in g.resources.items():
                        slots.append((g, rc, self.unsuffixed_options(g, rc, amount, anchor)))
            for combo in itertools.product(*(options for _, _, options in slots)):
                key = self._check(q, slots, combo, nested_aware)
                if key is not None:
                    found.add(key)
        return found

    def _check(self, q: Query, slots, combo, nested_aware: bool):
        amounts: Counter = Counter()
        mappings: dict[str, set[str]] = {}
        unsuffixed_traits: set[str] = set()
        for (g, rc, _), name in zip(slots, combo, strict=True):
            mappings.setdefault(g.suffix, set()).add(name)
            if g.suffix:
                for klass, amount in g.resources.items():
                    amounts[(name, klass)] += amount
            else:
                amounts[(name, rc)] += g.resources[rc]
                unsuffixed_traits |= self.by_name[name].traits
        for g in q.groups:
            if not g.suffix and not all(unsuffixed_traits & s for s in g.required):
                return None
        granular = [name for (g, _, _), name in zip(slots, combo, strict=True) if g.suffix]
        if q.group_policy == "isolate" and len(set(granular)) != len(granular):
            return None
        for suffixes in q.same_subtrees:
            rps = set().union(*(mappings.get(s, set()) for s in suffixes))
            common = set.intersection(*(self.ancestors(rp) for rp in rps))
            if len(rps) > 1 and not common & rps:
                return None
        for (name, rc), amount in amounts.items():
            if amount > self.room(self.by_name[name], rc):
                return None
        if not nested_aware:
            givers = {name for name, _ in amounts}
            if len({self.root(n) for n in givers}) != len(givers):
                return None
        return (frozenset((name, rc, amount) for (name, rc), amount in amounts.items()),
                frozenset((s, frozenset(rps)) for s, rps in mappings.items()))


# --- random clouds and queries ----------------------------------------------------

inventory_record = st.one_of(
    st.fixed_dictionaries({"total": st.integers(1, 6)}),
    st.fixed_dictionaries(
        {"total": st.integers(1, 6)},
        optional={"reserved": st.integers(0, 1), "max_unit": st.integers(1, 3),
                  "step_size": st.sampled_from([1, 1, 2]),
                  "allocation_ratio": st.sampled_from([1.0, 2.0])}))


@st.composite
def clouds(draw) -> list[Model]:
    count = draw(st.integers(1, 6))
    providers = []
    for i in range(count):
        parent = draw(st.sampled_from([None] + [p.name for p in providers]))
        inventory = {}
        for rc in draw(st.sets(st.sampled_from(CLASSES), min_size=1, max_size=2)):
            record = draw(inventory_record)
            record["max_unit"] = min(record.get("max_unit", record["total"]), record["total"])
            record["reserved"] = min(record.get("reserved", 0), record["total"] - 1)
            inventory[rc] = record
        traits = set(draw(st.sets(st.sampled_from(TRAITS))))
        if parent is None and draw(st.booleans()):
            traits.add(SHARES)
        aggs = set(draw(st.sets(st.sampled_from(AGGS))))
        providers.append(Model(f"p{i}", parent, inventory, traits, aggs))
    return providers


@st.composite
def queries(draw, providers: list[Model]) -> Query:
    version = draw(st.sampled_from(["1.28", "1.39", "1.39"]))
    new = version >= "1.39"
    names = [p.name for p in providers]
    present = sorted({rc for p in providers for rc in p.inventory})

    def traits():
        required = draw(st.lists(st.sets(st.sampled_from([*TRAITS, SHARES]), min_size=1,
                                         max_size=2 if new else 1), max_size=2))
        forbidden = set(draw(st.sets(st.sampled_from(TRAITS)))) - set().union(*required)
        return required, forbidden

    def aggregates():
        member_of = draw(st.lists(st.sets(st.sampled_from(AGGS), min_size=1), max_size=1))
        forbidden = set(draw(st.sets(st.sampled_from(AGGS), max_size=1 if new else 0))) \
            - set().union(*member_of)
        return member_of, forbidden

    def group(suffix: str, classes: int) -> Group:
        resources = {rc: draw(st.sampled_from([1, 1, 2]))
                     for rc in draw(st.sets(st.sampled_from(present), min_size=classes,
                                            max_size=max(classes, 2)))}
        g = Group(suffix, resources)
        if draw(st.integers(0, 2)) == 0:
            g.required, g.forbidden = traits()
        if draw(st.integers(0, 2)) == 0:
            g.member_of, g.forbidden_aggs = aggregates()
        if new and draw(st.integers(0, 4)) == 0:
            g.in_tree = draw(st.sampled_from(names))
        return g

    groups = []
    if draw(st.integers(0, 4)) > 0:
        groups.append(group("", 1))
    numbered = draw(st.integers(0 if groups else 1, 2))
    groups.extend(group(f"_G{i}" if new else str(i + 1), 1) for i in range(numbered))
    q = Query(version, groups)
    if new and draw(st.integers(0, 4)) == 0:
        resourceless = Group("_R", {})
        resourceless.required = [{draw(st.sampled_from([*TRAITS, SHARES]))}]
        groups.append(resourceless)
    suffixed = [g.suffix for g in groups if g.suffix]
    if len(suffixed) > 1 or draw(st.booleans()):
        q.group_policy = draw(st.sampled_from(["none", "isolate"]))
    if new:
        if "_R" in suffixed or (len(suffixed) > 1 and draw(st.booleans())):
            q.same_subtrees = [set(draw(st.sets(st.sampled_from(suffixed), min_size=1)))
                               | ({"_R"} if "_R" in suffixed else set())]
        if draw(st.integers(0, 3)) == 0:
            q.root_required = set(draw(st.sets(st.sampled_from(TRAITS), max_size=1)))
            q.root_forbidden = set(draw(st.sets(st.sampled_from(TRAITS), max_size=1))) \
                - q.root_required
    return q


def params(q: Query, cloud: Cloud) -> dict:
    out: dict = {}
    for g in q.groups:
        s = g.suffix
        if g.resources:
            out["resources" + s] = ",".join(f"{rc}:{a}" for rc, a in g.resources.items())
        forbidden = ["!" + t for t in sorted(g.forbidden)]
        if q.version >= "1.39":
            required = [",".join(sorted(x)) if len(x) == 1 else "in:" + ",".join(sorted(x))
                        for x in g.required] + ([",".join(forbidden)] if forbidden else [])
        else:
            # One value only before 1.39: single traits and forbidden ones.
            joined = sorted(t for x in g.required for t in x) + forbidden
            required = [",".join(joined)] if joined else []
        if required:
            out["required" + s] = required
        member_of = ["in:" + ",".join(sorted(cloud.aggregate(a) for a in x))
                     for x in g.member_of]
        if g.forbidden_aggs:
            member_of.append("!in:" + ",".join(sorted(cloud.aggregate(a)
                                                      for a in g.forbidden_aggs)))
        if member_of:
            out["member_of" + s] = member_of
        if g.in_tree:
            out["in_tree" + s] = cloud.uuid(g.in_tree)
    if q.group_policy:
        out["group_policy"] = q.group_policy
    root = sorted(q.root_required) + ["!" + t for t in sorted(q.root_forbidden)]
    if root:
        out["root_required"] = ",".join(root)
    if q.same_subtrees:
        out["same_subtree"] = [",".join(sorted(s)) for s in q.same_subtrees]
    return out


def build(cloud: Cloud, providers: list[Model], data) -> None:
    for trait in TRAITS:
        cloud.ensure_trait(trait)
    for p in providers:
        cloud.provider(p.name, parent=p.parent, traits=sorted(p.traits),
                       aggregates=sorted(p.aggs), **p.inventory)
    # Some usage on some providers, within capacity.
    ref = Reference(providers)
    usage = {}
    for p in providers:
        for rc in p.inventory:
            amounts = [n for n in range(1, 5) if ref.fits(p, rc, n)]
            if amounts and data.draw(st.integers(0, 2)) == 0:
                usage.setdefault(p.name, {})[rc] = data.draw(st.sampled_from(amounts))
    if usage:
        cloud.consume(usage)
        for name, resources in usage.items():
            ref.by_name[name].used.update(resources)


@settings(max_examples=int(os.environ.get("CANDIDATE_EXAMPLES", 25)), deadline=None,
          report_multiple_bugs=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_candidates_match_the_reference_and_can_be_claimed(client, database, data):
    database.reset()
    providers = data.draw(clouds())
    cloud = Cloud(client)
    build(cloud, providers, data)
    q = data.draw(queries(providers))
    resp = cloud.candidates(version=q.version, **params(q, cloud))
    assert resp.status == 200, resp
    body = resp.json()
    expected = Reference(providers).candidates(q)
    event(f"candidates: {min(len(expected), 4)}{'+' if len(expected) >= 4 else ''}")
    with_mappings = q.version >= "1.34"
    got = Counter()
    for request in body["allocation_requests"]:
        allocations = frozenset((cloud.name_of(u), rc, amount)
                                for u, a in request["allocations"].items()
                                for rc, amount in a["resources"].items())
        if with_mappings:
            got[(allocations, frozenset((s, frozenset(cloud.name_of(u) for u in rps))
                                        for s, rps in request["mappings"].items()))] += 1
        else:
            got[allocations] += 1
    want = Counter(key if with_mappings else key[0] for key in expected)
    assert got == want, (q, providers)
    # The read model (the default source) answers exactly as the tables do.
    reference = PlacementClient(make_app(
        make_conf(database.url, allotment__candidates_source="database"),
        db=database.db, prepare=False))
    reference_body = Cloud(reference).candidates(version=q.version, **params(q, cloud)).json()
    assert body == reference_body, (q, providers)
    # Explain, the engine's trace of the same search: the traced search (always the
    # spread path) finds the candidates the served one does, and every tree out of
    # the answer has a reason.
    major, minor = (int(n) for n in q.version.split("."))
    request = parse_request(HttpQuery(urlencode(params(q, cloud), doseq=True)),
                            Version(major, minor))
    with database.db.snapshot() as conn:
        state = load(conn)
    result = engine.find(ModelSource(state), request, Settings())
    # Under a limit (or the cap) the trees are laid out a window at a time, as
    # far as the walk goes (``plan.in_windows``): the answer is the first
    # candidates of the whole search, in its order. (Windows from one tree,
    # however many of these small clouds' providers share.)
    whole = [c.key() for c in engine.find(ModelSource(state), replace(request, limit=None),
                                          Settings()).candidates]
    with mock.patch.object(plan, "FIRST_WINDOW_LEAST", 1), \
            mock.patch.object(plan, "MOST_SHARERS", 1.0):
        for first in sorted({1, 2, 3, len(whole)} - {0}):
            limited = engine.find(ModelSource(state), replace(request, limit=first),
                                  Settings())
            assert [c.key() for c in limited.candidates] == whole[:first], (
                q, providers, first)
            capped = engine.find(ModelSource(state), replace(request, limit=None),
                                 Settings(max_candidates=first))
            assert [c.key() for c in capped.candidates] == whole[:first], (
                q, providers, first)
    trace = Trace()
    traced = engine.find(ModelSource(state), request, Settings(), trace=trace)
    assert [c.key() for c in traced.candidates] == [c.key() for c in result.candidates], (
        q, providers)
    explained = diagnosis.explain(state, request, traced, trace, Settings(), sample_limit=1000)
    assert all(reasons for _, _, reasons in explained.excluded), (q, providers)
    assert len(explained.excluded) == explained.total - explained.qualified
    assert explained.qualified >= len({root for c in result.candidates for root in c.roots})

    # Every request can be claimed as returned (a sample, to stay quick).
    for request in body["allocation_requests"][:3]:
        consumer = str(uuid.uuid4())
        claim = dict(request, project_id=str(uuid.uuid4()), user_id=str(uuid.uuid4()),
                     consumer_generation=None)
        version = "1.37" if with_mappings else "1.28"
        resp = client.put(f"/allocations/{consumer}", claim, version=version)
        assert resp.status == 204, (resp, q)
        assert client.delete(f"/allocations/{consumer}").status == 204


def test_reference_sanity():
    """The reference itself on a hand-checked case: CN + shared disk."""
    providers = [Model("cn", None, {"VCPU": {"total": 2}}, set(), {"agg1"}),
                 Model("ss", None, {"DISK_GB": {"total": 4}}, {SHARES}, {"agg1"})]
    q = Query("1.39", [Group("", {"VCPU": 1, "DISK_GB": 2})])
    (key,) = Reference(providers).candidates(q)
    assert key[0] == frozenset({("cn", "VCPU", 1), ("ss", "DISK_GB", 2)})
