"""Why no valid host: the trees an allocation-candidates query leaves out, and why.

Behind GET /explain/allocation_candidates. ``answer_and_explain`` answers the
query as GET /allocation_candidates does (``engine.find``), then judges every
tree of the very state that answered (the worker's read model, held for the
whole request, or the state loaded for it), in Python, group by group and
filter by filter, keeping the numbers that decided. Nothing is read twice:
the explanation cannot see a cloud other than the one the candidates came
from.

What counts:

* A tree is **qualified** when one of its providers is in the answer (gives
  resources or is named in a mapping), or when only sharing providers from
  elsewhere serve it and their offer is in the answer (the engine lists
  such an offer once, not once per tree). Every other tree is **excluded**.
* An excluded tree gets every reason that applies, not just the first: a
  host may lack a trait *and* room. Reasons come from each group's own
  filters (``in_tree``, aggregates, traits, inventory, capacity and the
  unit rules, through ``ledger.capacity``), from the request-wide filters
  (``root_required``), and, only when every group can be served on its own,
  from the rules between groups (``group_policy=isolate``,
  ``same_subtree``, several groups wanting more of a class than the tree
  has). A tree that passes all of these but is not in the answer was either
  cut by ``limit``/``max_allocation_candidates`` (``limit``) or has no
  combination that the search accepts (``combination``; e.g. the pre-1.29
  rule of one provider per tree, or required traits that no one choice of
  providers has together).

The per-group ``steps`` count providers left after each filter over the
whole cloud, like upstream's debug lines, and each is logged at DEBUG.
Request-wide reasons carry the group ``"*"``; reasons between groups name
the groups involved, comma-separated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from allotment.candidates import engine, rules, search
from allotment.candidates.budget import Budget
from allotment.candidates.engine import Result, SearchObserver
from allotment.candidates.model import ReadModel, State, state_for_request
from allotment.candidates.request import CandidateRequest, RequestGroup, Settings
from allotment.candidates.resolved import (
    GroupIds,
    Roots,
    group_ids,
    unknown_classes,
    unknown_traits,
)
from allotment.candidates.sources import ModelSource
from allotment.db.engine import Database
from allotment.ledger.capacity import InventoryWithUsage

LOG = logging.getLogger(__name__)

# The group of request-wide reasons (root_required, limit, combination).
WHOLE_REQUEST = "*"

# Every ``filter`` a reason may name.
FILTERS = ("unknown_name", "unknown_aggregate", "unknown_in_tree", "in_tree", "member_of",
           "forbidden_aggregate", "required_trait", "forbidden_trait", "no_inventory",
           "capacity", "min_unit", "max_unit", "step_size", "root_required",
           "root_forbidden", "group_policy_isolate", "same_subtree", "combination", "limit")


# --- the cloud, as the engine saw it ---------------------------------------------

class Cloud:
    """The state that answered the request, read the way the judging reads it."""

    def __init__(self, state: State, sharing_trait: int | None) -> None:
        self.state = state
        self.providers = state.providers
        # root -> the providers of its tree, in id order; trees in order of their
        # first provider
        self.trees = state.tree_lists()
        self.sharing: AbstractSet[int] = (state.with_trait.get(sharing_trait, set())
                                          if sharing_trait is not None else frozenset())
        self.shared_with = self._shared_with()

    def name(self, rp: int) -> str:
        provider = self.providers[rp]
        return provider.name or provider.uuid

    def holds(self, rp: int, rc: int) -> bool:
        return rc in self.providers[rp].inventories

    def inventory(self, rp: int, rc: int) -> InventoryWithUsage:
        return self.providers[rp].inventories[rc]

    def holders(self, rc: int) -> list[int]:
        return self.state.sorted_holders(rc)

    def traits_of(self, rp: int) -> frozenset[int]:
        return self.providers[rp].traits

    def aggregates_of(self, rp: int) -> frozenset[int]:
        provider = self.providers.get(rp)
        return provider.aggregates if provider is not None else frozenset()

    def _shared_with(self) -> dict[int, list[int]]:
        """root -> the sharing providers of other trees in an aggregate with one of
        its providers: the engine's own reach (``ModelSource.sharing_anchors``),
        before root_required and forbidden aggregates, which explain judges."""
        anchors = ModelSource(self.state).sharing_anchors(self.sharing, Roots(), frozenset())
        found: dict[int, list[int]] = {}
        for share in sorted(anchors):
            own_root = self.providers[share].root
            for anchor in anchors[share]:
                if anchor.root != own_root:
                    found.setdefault(anchor.root, []).append(share)
        return found


# --- reasons -----------------------------------------------------------------

class Reason:
    """One thing that keeps a tree out of the answer.

    ``detail`` may be given as a function: a rule's refusal is put in words
    only for the trees the answer describes, not for every tree counted.
    """

    __slots__ = ("_detail", "_identity", "filter", "group", "numbers", "provider_uuid",
                 "resource_class")

    def __init__(self, group: str, filter: str, detail: str | Callable[[], str],
                 provider_uuid: str | None = None, resource_class: str | None = None,
                 numbers: tuple[tuple[str, int], ...] = (), decided_by: object = None) -> None:
        self.group = group
        self.filter = filter
        self._detail = detail
        self.provider_uuid = provider_uuid
        self.resource_class = resource_class
        # requested, capacity, used, free, min_unit, max_unit, step_size where they apply
        self.numbers = numbers
        # Two reasons are the same when they say the same of the same provider.
        self._identity = (group, filter, provider_uuid, resource_class, numbers,
                          detail if isinstance(detail, str) else decided_by)

    @property
    def detail(self) -> str:
        if not isinstance(self._detail, str):
            self._detail = self._detail()
        return self._detail

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reason) and self._identity == other._identity

    def __hash__(self) -> int:
        return hash(self._identity)

    def __repr__(self) -> str:
        return f"Reason({self.group!r}, {self.filter!r}, {self.detail!r})"

    def key(self) -> tuple[str, str, str | None]:
        """What ``reasons`` counts trees by."""
        return (self.group, self.filter, self.resource_class)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "filter": self.filter,
                "provider_uuid": self.provider_uuid, "resource_class": self.resource_class,
                **dict(self.numbers), "detail": self.detail}


@dataclass
class _Context:
    """The request with ids, the names to show, and the cloud (read-only)."""

    request: CandidateRequest
    groups: list[GroupIds]
    cloud: Cloud
    class_names: dict[int, str]
    trait_names: dict[int, str]
    aggregate_uuids: dict[int, str]
    root_required: frozenset[int]
    root_forbidden: frozenset[int]
    root_rule: rules.RootTraits | None = None
    sharing_trait: int | None = None
    # suffix -> the classes and traits of the group that do not exist
    unknown_names: dict[str, list[str]] = field(default_factory=dict)
    _rules: dict[tuple[str, bool, bool], list[rules.Rule]] = field(default_factory=dict)
    _fits: dict[tuple[int, int], rules.Fits] = field(default_factory=dict)

    def fits(self, rc: int, amount: int) -> rules.Fits:
        found = self._fits.get((rc, amount))
        if found is None:
            found = self._fits[(rc, amount)] = rules.Fits(rc, amount)
        return found

    def provider_rules(self, group: GroupIds, member_of: bool,
                       root_aggs: bool) -> list[rules.Rule]:
        """The rules a provider must pass itself to serve ``group``, in the order
        explain reports them (see ``_provider_filters``)."""
        key = (group.suffix, member_of, root_aggs)
        found = self._rules.get(key)
        if found is None:
            found = []
            if group.tree_root is not None:
                found.append(rules.InTree(group.tree_root))
            if member_of and group.member_of:
                found.append(rules.MemberOf(group.member_of, self.cloud.state,
                                            with_root=root_aggs))
            if group.forbidden_aggs:
                found.append(rules.ForbiddenAggregates(group.forbidden_aggs))
            if group.same_provider and group.required:
                found.append(rules.RequiredTraits(group.required))
            if group.forbidden:
                found.append(rules.ForbiddenTraits(group.forbidden))
            self._rules[key] = found
        return found

    def name(self, rp: int) -> str:
        return self.cloud.name(rp)

    def uuid(self, rp: int) -> str:
        return self.cloud.providers[rp].uuid

    def traits_text(self, traits: Iterable[int]) -> str:
        return ", ".join(sorted(self.trait_names[i] for i in traits))

    def aggs_text(self, aggs: Iterable[int]) -> str:
        return ", ".join(sorted(self.aggregate_uuids[i] for i in aggs))

    def any_of(self, sets: Iterable[frozenset[int]],
               names: Callable[[frozenset[int]], list[str]]) -> str:
        return " and ".join(" or ".join(sorted(names(s))) if len(s) > 1 else names(s)[0]
                            for s in sets)

    def traits_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return self.any_of(sets, lambda s: [self.trait_names[i] for i in s])

    def aggs_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return self.any_of(sets, lambda s: [self.aggregate_uuids[i] for i in s])


def _word(ctx: _Context, suffix: str, refusal: rules.Refusal, rp: int,
          rc: int | None = None) -> Reason:
    """A rule's refusal of provider ``rp``, to be put in words if shown."""
    rc_name = ctx.class_names[rc] if rc is not None else None
    return Reason(suffix, refusal.filter, lambda: _words(ctx, refusal, rp, rc_name),
                  ctx.uuid(rp), rc_name, refusal.numbers, decided_by=refusal.sets)


# What each rule's refusal says; the numbers are the refusal's own.
_WORDS = {
    "in_tree": "{name} is not in the in_tree provider's tree",
    "member_of": "{name} is not in aggregate {aggregates_any_of}",
    "forbidden_aggregate": "{name} is in forbidden aggregate {aggregates}",
    "required_trait": "{name} lacks required trait {traits_any_of}",
    "forbidden_trait": "{name} has forbidden trait {traits}",
    "root_required": "root {name} lacks required trait {traits}",
    "root_forbidden": "root {name} has forbidden trait {traits}",
    "min_unit": "{name} allocates at least {min_unit} {rc} at a time, {requested} requested",
    "max_unit": "{name} allocates at most {max_unit} {rc} at a time, {requested} requested",
    "step_size": "{name} allocates {rc} in steps of {step_size}, {requested} requested",
    "capacity": "{name} has {free_or_none} {rc} free of {capacity}, {requested} requested",
}


def _words(ctx: _Context, refusal: rules.Refusal, rp: int, rc_name: str | None) -> str:
    """What a rule's refusal of provider ``rp`` says."""
    fields: dict[str, object] = {"name": ctx.name(rp), "rc": rc_name, **dict(refusal.numbers)}
    if refusal.filter in ("member_of", "forbidden_aggregate"):
        fields["aggregates"] = ctx.aggs_text(refusal.ids)
        fields["aggregates_any_of"] = ctx.aggs_any_of(refusal.sets)
    elif refusal.sets:
        fields["traits"] = ctx.traits_text(refusal.ids)
        fields["traits_any_of"] = ctx.traits_any_of(refusal.sets)
    if "free" in fields:
        fields["free_or_none"] = max(dict(refusal.numbers)["free"], 0)
    return _WORDS[refusal.filter].format(**fields)


def _room(ctx: _Context, suffix: str, rp: int, rc: int, amount: int) -> list[Reason]:
    """Why ``rp`` cannot give ``amount`` of ``rc`` (empty when it can)."""
    provider = ctx.cloud.providers[rp]
    fits = ctx.fits(rc, amount)
    if fits.passes(provider):
        return []
    return [_word(ctx, suffix, refusal, rp, rc) for refusal in fits.why_not(provider)]


def _provider_filters(ctx: _Context, group: GroupIds, rp: int, member_of: bool,
                      root_aggs: bool) -> list[Reason]:
    """Why ``rp`` fails the group's trait and aggregate rules itself.

    ``member_of``: check membership on the provider (else the caller did it
    for the tree); ``root_aggs``: membership of the root counts too (the
    unsuffixed group's local providers).
    """
    checks = ctx.provider_rules(group, member_of, root_aggs)
    if not checks:
        return []
    provider = ctx.cloud.providers[rp]
    return [_word(ctx, group.suffix, refusal, rp)
            for rule in checks if not rule.passes(provider)
            for refusal in rule.why_not(provider)]


@dataclass
class _Judged:
    """One group in one tree: why not, and who could serve it."""

    reasons: list[Reason] = field(default_factory=list)
    # one slot per choice (a granular group: one; the unsuffixed group: one
    # per class): (amounts, providers that can serve it)
    slots: list[tuple[tuple[tuple[int, int], ...], list[int]]] = field(default_factory=list)


def _granular(ctx: _Context, group: GroupIds, root: int) -> _Judged:
    """A suffixed group: one provider of the tree (or sharing it) serves all of it."""
    cloud, suffix = ctx.cloud, group.suffix
    judged = _Judged()
    foreign = cloud.shared_with.get(root, [])
    if group.tree_root is not None and root != group.tree_root and not any(
            cloud.providers[s].root == group.tree_root for s in foreign):
        judged.reasons.append(Reason(suffix, "in_tree", f"{ctx.name(root)} is not the tree "
                                     "of the in_tree provider", ctx.uuid(root)))
        return judged
    pool = cloud.trees[root] + foreign
    classes = [rc for rc, _ in group.resources]
    missing = [rc for rc in classes if not any(cloud.holds(rp, rc) for rp in pool)]
    for rc in missing:
        judged.reasons.append(_no_inventory(ctx, suffix, root, rc, foreign))
    if missing:
        return judged
    holding = [rp for rp in pool if all(cloud.holds(rp, rc) for rc in classes)]
    if not holding:
        names = ", ".join(ctx.class_names[rc] for rc in classes)
        judged.reasons.append(Reason(suffix, "combination", f"no single provider of "
                                     f"{ctx.name(root)} has inventory of all of {names}"))
        return judged
    serving = []
    failures: list[Reason] = []
    for rp in holding:
        found = _provider_filters(ctx, group, rp, member_of=True, root_aggs=False)
        for rc, amount in group.resources:
            found += _room(ctx, suffix, rp, rc, amount)
        if found:
            failures += found
        else:
            serving.append(rp)
    if not serving:
        judged.reasons += failures
    judged.slots.append((group.resources, serving))
    return judged


def _nobody(ctx: _Context, root: int, foreign: list[int], has: str, lacks: str) -> str:
    """"cn-17 lacks X" for a lone provider, else "no provider of cn-17 (...) has X"."""
    name = ctx.name(root)
    if len(ctx.cloud.trees[root]) == 1 and not foreign:
        return f"{name} {lacks}"
    sharing = " (nor a sharing provider serving it)" if foreign else ""
    return f"no provider of {name}{sharing} {has}"


def _lone(ctx: _Context, root: int, foreign: list[int]) -> str | None:
    """The root's uuid when it is all the tree has to offer (a reason about the tree)."""
    return ctx.uuid(root) if len(ctx.cloud.trees[root]) == 1 and not foreign else None


def _no_inventory(ctx: _Context, suffix: str, root: int, rc: int,
                  foreign: list[int]) -> Reason:
    rc_name = ctx.class_names[rc]
    return Reason(suffix, "no_inventory", _nobody(ctx, root, foreign, f"has {rc_name} inventory",
                                                  f"has no {rc_name} inventory"),
                  resource_class=rc_name)


def _unsuffixed(ctx: _Context, group: GroupIds, root: int) -> _Judged:
    """The unsuffixed group: each class from any provider of the tree or a sharing one."""
    cloud = ctx.cloud
    judged = _Judged()
    if group.tree_root is not None and root != group.tree_root:
        judged.reasons.append(Reason("", "in_tree", f"{ctx.name(root)} is not the tree of "
                                     "the in_tree provider", ctx.uuid(root)))
        return judged
    if group.forbidden_aggs:
        refused = rules.RootOutsideAggregates(group.forbidden_aggs, cloud.state).why_not(
            cloud.providers[root])
        if refused:
            judged.reasons.append(Reason("", "forbidden_aggregate", f"root {ctx.name(root)} is "
                                         f"in forbidden aggregate "
                                         f"{ctx.aggs_text(refused[0].ids)}", ctx.uuid(root)))
            return judged
    local = cloud.trees[root]
    # With in_tree, providers of other trees do not serve the unsuffixed group.
    foreign = cloud.shared_with.get(root, []) if group.tree_root is None else []
    everyone = local + foreign if foreign else local
    tree_member = True
    if group.member_of:
        member = rules.MemberOf(group.member_of).passes
        providers = cloud.providers
        tree_member = member(providers[root]) or any(member(providers[rp])
                                                     for rp in everyone)
        if not tree_member:
            aggs = ctx.aggs_any_of(group.member_of)
            judged.reasons.append(Reason("", "member_of", _nobody(
                ctx, root, foreign, f"is in aggregate {aggs}", f"is not in aggregate {aggs}"),
                _lone(ctx, root, foreign)))
    seen: set[Reason] = set(judged.reasons)
    traits: frozenset[int] = frozenset()
    for rc, amount in group.resources:
        pool = [rp for rp in everyone if cloud.holds(rp, rc)]
        if not pool:
            judged.reasons.append(_no_inventory(ctx, "", root, rc, foreign))
            continue
        serving = []
        failures: list[Reason] = []
        for rp in pool:
            traits |= cloud.traits_of(rp)
            found = _provider_filters(ctx, group, rp, member_of=tree_member,
                                      root_aggs=rp in local)
            found += _room(ctx, "", rp, rc, amount)
            if found:
                failures += found
            else:
                serving.append(rp)
        if not serving:
            # Trait and aggregate reasons repeat for each class a provider holds.
            for reason in failures:
                if reason not in seen:
                    seen.add(reason)
                    judged.reasons.append(reason)
        judged.slots.append((((rc, amount),), serving))
    unmet = rules.RequiredTraits(group.required).unmet(traits) if group.required else []
    if unmet:
        wanted = ctx.traits_any_of(unmet[0].sets)
        judged.reasons.append(Reason("", "required_trait", _nobody(
            ctx, root, foreign, f"with a requested class has trait {wanted}",
            f"lacks required trait {wanted}"), _lone(ctx, root, foreign)))
    return judged


def _root_filters(ctx: _Context, root: int) -> list[Reason]:
    """root_required, request-wide: the tree's root has / lacks these traits."""
    rule = ctx.root_rule
    if rule is None:
        return []
    return [_word(ctx, WHOLE_REQUEST, refusal, root)
            for refusal in rule.why_not(ctx.cloud.providers[root])]


def _impossible(ctx: _Context, request_group: RequestGroup, group: GroupIds) -> Reason:
    """The reason every tree gets for a group that can match nothing anywhere."""
    suffix = group.suffix
    unknown = ctx.unknown_names.get(suffix)
    if unknown:
        # Only asked when the engine answered without refusing it: upstream
        # found nothing before it read this group (``resolved.refuse_unknown``).
        return Reason(suffix, "unknown_name", f"no such resource class or trait: "
                      f"{', '.join(unknown)} (the request is not refused: as upstream, an "
                      "earlier filter or group found nothing first)")
    if not group.possible and request_group.in_tree and group.tree_root is None:
        return Reason(suffix, "unknown_in_tree", f"in_tree provider {request_group.in_tree} "
                      "does not exist")
    if not group.possible:
        unknown = sorted(u for s in request_group.member_of for u in s
                         if all(a not in ctx.aggregate_uuids.values() for a in s))
        return Reason(suffix, "unknown_aggregate", "member_of names only aggregates that do "
                      f"not exist: {', '.join(unknown)}")
    return Reason(suffix, "combination", "the group has no resources, required traits or "
                  "member_of to select a provider by")


def _between_groups(ctx: _Context, root: int, judged: list[tuple[GroupIds, _Judged]]
                    ) -> list[Reason]:
    """Rules between groups, once every group can be served on its own."""
    cloud, name = ctx.cloud, ctx.name(root)
    found = []
    takers: dict[int, list[tuple[str, int]]] = {}
    suppliers: dict[int, set[int]] = {}
    for group, result in judged:
        for amounts, options in result.slots:
            for rc, amount in amounts:
                takers.setdefault(rc, []).append((group.suffix, amount))
                suppliers.setdefault(rc, set()).update(options)
    for rc, wanted in takers.items():
        if len(wanted) < 2:
            continue
        total = sum(amount for _, amount in wanted)
        # The most one allocation may take from each provider (none when over capacity).
        room = sum(max(cloud.inventory(rp, rc).room, 0) for rp in suppliers[rc])
        if total > room:
            groups = ", ".join(sorted({f"'{suffix}'" for suffix, _ in wanted}))
            rc_name = ctx.class_names[rc]
            found.append(Reason(",".join(sorted({s for s, _ in wanted})), "combination",
                                f"groups {groups} together request {total} {rc_name}; "
                                f"{name} and its sharing providers can give {room}",
                                resource_class=rc_name,
                                numbers=(("requested", total), ("free", room))))
    granular = [(group.suffix, result.slots[0][1]) for group, result in judged
                if group.same_provider]
    if ctx.request.isolate and len(granular) > 1:
        fitting = search.matching_size([options for _, options in granular])
        if fitting < len(granular):
            suffixes = ",".join(suffix for suffix, _ in granular)
            found.append(Reason(suffixes, "group_policy_isolate", f"groups {suffixes} need "
                                f"distinct providers (group_policy=isolate); {name} can give "
                                f"at most {fitting} of them one each"))
    options_of = dict(granular)
    for subtree in ctx.request.same_subtrees:
        if len(subtree) < 2 or not subtree <= options_of.keys():
            continue
        members = sorted(subtree)
        # One chosen provider must be an ancestor (or itself) of all the others.
        # Options may be sharing providers of other trees: their trees count too.
        trees = {cloud.providers[rp].root for s in members for rp in options_of[s]}
        ancestors = search.ancestors({rp: cloud.providers[rp].parent
                                      for tree in trees for rp in cloud.trees[tree]})
        if not any(all(any(top in ancestors[rp] for rp in options_of[s]) for s in members)
                   for first in members for top in options_of[first]):
            found.append(Reason(",".join(members), "same_subtree", f"no provider of {name} "
                                f"has groups {', '.join(members)} within its subtree"))
    return found


def _plain_trees(ctx: _Context, passing: dict[str, set[int]],
                 impossible: dict[str, Reason]) -> set[int]:
    """Trees of one provider that pass every rule of every group, where nothing
    else could decide: no sharing provider serves or is the tree, and no rule
    between groups applies. Judging one of them finds no reason, so it is not
    judged (at 10,000 hosts this is most of them); ``check_answered`` judges
    them all and compares."""
    groups = ctx.groups
    if impossible or not groups:
        return set()
    taken = [rc for group in groups for rc, _ in group.resources]
    granular = [group for group in groups if group.same_provider]
    if (len(taken) != len(set(taken)) or (ctx.request.isolate and len(granular) > 1)
            or any(len(subtree) > 1 for subtree in ctx.request.same_subtrees)):
        return set()
    cloud = ctx.cloud
    found = set.intersection(*(passing[group.suffix] for group in groups))
    return {rp for rp in found if len(cloud.trees.get(rp, ())) == 1
            and rp not in cloud.sharing and rp not in cloud.shared_with}


def _judge_tree(ctx: _Context, root: int, impossible: dict[str, Reason]
                ) -> tuple[list[Reason], list[tuple[GroupIds, _Judged]]]:
    """Every reason that keeps ``root``'s tree out, and each group's options there."""
    reasons = _root_filters(ctx, root)
    judged: list[tuple[GroupIds, _Judged]] = []
    groups_ok = True
    for group in ctx.groups:
        if group.suffix in impossible:
            reasons.append(impossible[group.suffix])
            groups_ok = False
            continue
        result = _granular(ctx, group, root) if group.same_provider or not group.resources \
            else _unsuffixed(ctx, group, root)
        if result.reasons or any(not options for _, options in result.slots):
            groups_ok = False
            reasons += result.reasons
        judged.append((group, result))
    if groups_ok:
        reasons += _between_groups(ctx, root, judged)
    return reasons, judged


# --- steps: providers left after each filter, per group -----------------------

class _Steps:
    """Providers left after each filter, group by group (like upstream's debug lines)."""

    def __init__(self, ctx: _Context) -> None:
        self.ctx = ctx
        self.rows: list[dict[str, Any]] = []
        providers = ctx.cloud.providers
        self.root_of = {rp: p.root for rp, p in providers.items()}

    def step(self, suffix: str, name: str, providers: Iterable[int], detail: str) -> set[int]:
        kept = set(providers)
        text = detail.format(n=len(kept))
        self.rows.append({"group": suffix, "filter": name, "providers": len(kept),
                          "detail": text})
        LOG.debug("explain: group '%s' %s: %s", suffix, name, text)
        return kept

    def kept(self, rule: rules.Rule, pool: set[int]) -> Iterable[int]:
        providers = self.ctx.cloud.providers
        return (rp for rp in pool if rule.passes(providers[rp]))

    def with_room(self, group: GroupIds) -> list[set[int]]:
        """Per requested class, the providers with room for the group's amount."""
        ctx, cloud = self.ctx, self.ctx.cloud
        found = []
        for rc, amount in group.resources:
            rc_name = ctx.class_names[rc]
            holders = cloud.holders(rc)
            self.step(group.suffix, f"inventory:{rc_name}", holders,
                      f"found {{n}} providers with {rc_name} inventory")
            fits = rules.Fits(rc, amount)
            found.append(self.step(
                group.suffix, f"resources:{rc_name}", self.kept(fits, set(holders)),
                f"found {{n}} providers with available {amount} {rc_name}"))
        return found

    def first_pool(self, group: GroupIds, with_room: list[set[int]]) -> set[int]:
        if not with_room:
            return self.step(group.suffix, "providers", self.ctx.cloud.providers,
                             "{n} providers in all")
        if not group.same_provider:
            return set.union(*with_room)
        pool = set.intersection(*with_room)
        if len(with_room) > 1:
            pool = self.step(group.suffix, "resources", pool,
                             "{n} providers have room for all of the group's resources")
        return pool

    def filtered(self, group: GroupIds, pool: set[int]) -> set[int]:
        """``pool`` after each of the group's trait and aggregate rules in turn."""
        ctx, cloud, suffix = self.ctx, self.ctx.cloud, group.suffix
        unsuffixed = not group.same_provider and bool(group.resources)
        providers, state = cloud.providers, cloud.state
        if group.tree_root is not None:
            pool = self.step(suffix, "in_tree", self.kept(rules.InTree(group.tree_root), pool),
                             "after filtering by in_tree: {n}")
        if group.member_of:
            member = rules.MemberOf(group.member_of, state, with_root=unsuffixed)
            pool = self.step(suffix, "member_of", self.kept(member, pool),
                             "after filtering by member_of: {n}")
        if group.forbidden_aggs:
            own = rules.ForbiddenAggregates(group.forbidden_aggs)
            of_root = rules.RootOutsideAggregates(group.forbidden_aggs, state)
            pool = self.step(suffix, "forbidden_aggregate", (
                rp for rp in pool if own.passes(providers[rp])
                and not (unsuffixed and not of_root.passes(providers[rp]))),
                "after filtering by forbidden aggregates: {n}")
        if group.required:
            pool = self.step(suffix, "required_trait", self._meeting(group, pool, unsuffixed),
                             "after filtering by required traits: {n}")
        if group.forbidden:
            pool = self.step(suffix, "forbidden_trait",
                             self.kept(rules.ForbiddenTraits(group.forbidden), pool),
                             "after filtering by forbidden traits: {n}")
        if ctx.root_required:
            pool = self._root_step(group, pool, "root_required", "root_required",
                                   rules.RootTraits(ctx.root_required, frozenset(), state))
        if ctx.root_forbidden:
            pool = self._root_step(group, pool, "root_forbidden", "forbidden root traits",
                                   rules.RootTraits(frozenset(), ctx.root_forbidden, state))
        return pool

    def _root_step(self, group: GroupIds, pool: set[int], name: str, words: str,
                   rule: rules.RootTraits) -> set[int]:
        # A provider serving other trees is not held to its own root's traits:
        # the engine's rule for who does (``rules.sharing_escape``).
        providers = self.ctx.cloud.providers
        shares = rules.sharing_escape(group, self.ctx.sharing_trait)
        return self.step(group.suffix, name, (
            rp for rp in pool if rule.passes(providers[rp])
            or (shares is not None and shares.passes(providers[rp]))),
            f"after filtering by {words}: {{n}}")

    def _meeting(self, group: GroupIds, pool: set[int], unsuffixed: bool) -> Iterable[int]:
        required = rules.RequiredTraits(group.required)
        if not unsuffixed:
            return self.kept(required, pool)
        # The unsuffixed group's traits may come from several providers of a tree.
        root_of, cloud = self.root_of, self.ctx.cloud
        tree_traits: dict[int, frozenset[int]] = {}
        for rp in pool:
            tree_traits[root_of[rp]] = tree_traits.get(root_of[rp], frozenset()) \
                | cloud.traits_of(rp)
        return (rp for rp in pool if required.met_by(tree_traits[root_of[rp]]))


def _steps(ctx: _Context) -> tuple[list[dict[str, Any]], dict[str, set[int]]]:
    """The steps, and per group the providers that pass every one of its rules
    on their own (its last step)."""
    steps = _Steps(ctx)
    passing: dict[str, set[int]] = {}
    for group, request_group in zip(ctx.groups, ctx.request.groups, strict=True):
        if not group.possible:
            reason = _impossible(ctx, request_group, group)
            steps.step(group.suffix, reason.filter, (), "{n} providers: " + reason.detail)
            continue
        with_room = steps.with_room(group)
        pool = steps.filtered(group, steps.first_pool(group, with_room))
        # The unsuffixed group's pool is per class; one provider alone needs all.
        passing[group.suffix] = pool if group.same_provider or not with_room \
            else pool.intersection(*with_room)
    return steps.rows, passing


# --- the explanation ----------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_SUMMARIES = {
    "unknown_name": "the group names a class or trait that does not exist",
    "unknown_aggregate": "member_of names only aggregates that do not exist",
    "unknown_in_tree": "the in_tree provider does not exist",
    "in_tree": "not the in_tree provider's tree",
    "member_of": "not in the requested aggregates",
    "forbidden_aggregate": "in a forbidden aggregate",
    "required_trait": "a required trait is missing",
    "forbidden_trait": "a provider has a forbidden trait",
    "no_inventory": "no {rc} inventory",
    "capacity": "no provider has {amount} {rc} free",
    "min_unit": "{amount} {rc} is below a provider's min_unit",
    "max_unit": "{amount} {rc} is above a provider's max_unit",
    "step_size": "{amount} {rc} is not a multiple of a provider's step_size",
    "root_required": "the root lacks a required trait",
    "root_forbidden": "the root has a forbidden trait",
    "group_policy_isolate": "the groups cannot get distinct providers",
    "same_subtree": "the groups cannot be served within one subtree",
    "combination": "no combination of providers serves all groups together",
    "limit": "qualified, but the answer was cut before reaching it",
}


def _summary(ctx: _Context, key: tuple[str, str, str | None], trees: int) -> str:
    group, name, rc = key
    amount = next((a for g in ctx.groups if g.suffix == group
                   for c, a in g.resources if ctx.class_names[c] == rc), "")
    if name == "combination" and rc is not None:
        text = f"the groups together want more {rc} than the tree has"
    else:
        text = _SUMMARIES[name].format(rc=rc, amount=amount)
    return f"{_plural(trees, 'tree')}: {text}"


@dataclass
class Explanation:
    total: int
    qualified: int
    steps: list[dict[str, Any]]
    # (group, filter, class) -> trees, most first
    counts: list[tuple[tuple[str, str, str | None], int, str]]
    # (root uuid, root name, reasons), at most the sample limit
    excluded: list[tuple[str, str, list[Reason]]]
    # With ``check_answered``: trees in the answer that the judging would
    # have excluded (root uuid -> reasons); always empty unless a rule here
    # and the engine's disagree.
    disagreements: dict[str, list[Reason]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "trees": {"total": self.total, "qualified": self.qualified,
                      "excluded": self.total - self.qualified},
            "steps": self.steps,
            "reasons": [{"group": group, "filter": name, "resource_class": rc,
                         "trees": trees, "detail": detail}
                        for (group, name, rc), trees, detail in self.counts],
            "excluded": [{"root_provider_uuid": uuid, "root_provider_name": name,
                          "reasons": [r.as_dict() for r in reasons]}
                         for uuid, name, reasons in self.excluded],
        }


def _answered_roots(cloud: Cloud, result: Result, sharing: bool = True) -> set[int]:
    """Roots of every provider the answer names (``sharing``: sharing ones too)."""
    named = {rp for c in result.candidates for rp in c.allocations}
    named |= {rp for c in result.candidates for rps in c.mappings.values() for rp in rps}
    return {cloud.providers[rp].root for rp in named
            if rp in cloud.providers and (sharing or rp not in cloud.sharing)}


def answer_and_explain(db: Database, model: ReadModel | None, request: CandidateRequest,
                       settings: Settings, sample_limit: int = 10,
                       budget: Budget | None = None,
                       observer: SearchObserver | None = None) -> tuple[Result, Explanation]:
    """The answer to ``request``, as ``engine.answer`` gives it, and why the other
    trees are not in it, judged on the state that answered (held throughout)."""
    # Held throughout, not let go early: the judging reads the same state.
    with state_for_request(db, model) as held:
        result = engine.find(ModelSource(held.state), request, settings, budget=budget,
                             observer=observer)
        return result, explain(held.state, request, result, settings, sample_limit)


def explain(state: State, request: CandidateRequest, result: Result,
            settings: Settings, sample_limit: int = 10,
            check_answered: bool = False) -> Explanation:
    """Why the trees of ``state`` are (not) in ``result``, its answer to ``request``.

    Raises what the engine raises for unknown names.
    ``check_answered`` also judges the trees in the answer (for tests).
    """
    names = ModelSource(state).resolve(request)
    groups = [group_ids(group, names) for group in request.groups]
    cloud = Cloud(state, names.sharing_trait)
    ctx = _Context(
        request=request, groups=groups, cloud=cloud,
        class_names={rc: name for name, rc in names.classes.items()},
        trait_names={trait: name for name, trait in names.traits.items()},
        aggregate_uuids={agg: uuid for uuid, agg in names.aggregates.items()},
        root_required=frozenset(names.traits[n] for n in request.root_required),
        root_forbidden=frozenset(names.traits[n] for n in request.root_forbidden),
        sharing_trait=names.sharing_trait,
        unknown_names={g.suffix: [*unknown_classes(g, names), *unknown_traits(g, names)]
                       for g in request.groups})
    if ctx.root_required or ctx.root_forbidden:
        ctx.root_rule = rules.RootTraits(ctx.root_required, ctx.root_forbidden, state)
    steps, passing = _steps(ctx)
    impossible = {group.suffix: _impossible(ctx, spec, group)
                  for group, spec in zip(groups, request.groups, strict=True)
                  if not group.possible or not group.selects}
    plain = _plain_trees(ctx, passing, impossible)
    answered = _answered_roots(cloud, result)
    anchored = _answered_roots(cloud, result, sharing=False) if check_answered else set()
    # Offers made only by sharing providers: the engine lists each once.
    foreign_offers = [set(c.allocations) for c in result.candidates
                      if set(c.allocations) <= cloud.sharing]
    found = len(result.candidates)
    cut = [f"limit={request.limit}" for _ in [0]
           if request.limit is not None and found >= request.limit]
    cut += [f"max_allocation_candidates={settings.max_candidates}" for _ in [0]
            if 0 <= settings.max_candidates <= found]

    counts: dict[tuple[str, str, str | None], int] = {}
    sample: list[tuple[str, str, list[Reason]]] = []
    qualified = 0
    disagreements: dict[str, list[Reason]] = {}
    for root in cloud.trees:
        if root in answered:
            qualified += 1
            if check_answered and root in anchored:
                reasons, _ = _judge_tree(ctx, root, impossible)
                if reasons:
                    disagreements[ctx.uuid(root)] = reasons
            continue
        judged: list[tuple[GroupIds, _Judged]] = []
        if root in plain and not check_answered:
            reasons = []
        else:
            reasons, judged = _judge_tree(ctx, root, impossible)
            if check_answered and root in plain and reasons:
                disagreements[ctx.uuid(root)] = reasons
        if not reasons and root not in plain:
            options = {rp for _, j in judged for _, opts in j.slots for rp in opts}
            local = any(cloud.providers[rp].root == root for rp in options)
            if not local and any(offer <= options for offer in foreign_offers):
                qualified += 1
                continue
        if not reasons:
            name = ctx.name(root)
            if cut:
                reasons = [Reason(WHOLE_REQUEST, "limit", f"{name} qualifies, but the answer "
                                  f"stops at {cut[0]} candidates", ctx.uuid(root))]
            else:
                reasons = [Reason(WHOLE_REQUEST, "combination", f"each group has providers "
                                  f"in {name}, but no combination of them serves all groups "
                                  "together", ctx.uuid(root))]
        for key in {reason.key() for reason in reasons}:
            counts[key] = counts.get(key, 0) + 1
        if len(sample) < sample_limit:
            sample.append((ctx.uuid(root), ctx.name(root), reasons))
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0][0], item[0][1],
                                                       item[0][2] or ""))
    explanation = Explanation(
        total=len(cloud.trees), qualified=qualified, steps=steps,
        counts=[(key, trees, _summary(ctx, key, trees)) for key, trees in ordered],
        excluded=sample, disagreements=disagreements)
    LOG.debug("explain: %d trees, %d qualified, %d excluded", explanation.total, qualified,
              explanation.total - qualified)
    return explanation
