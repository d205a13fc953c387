"""Why no valid host: the trees an allocation-candidates query leaves out, and why.

Behind GET /explain/allocation_candidates. ``engine.find`` answers the query
as usual; ``explain`` then looks the names up again (``query.resolve``) and
reads the cloud in four statements over whole tables, in the same read
transaction (``read_cloud``: providers; inventories of the requested classes
with their usage; the provider traits the request names; the aggregate
memberships the request and the sharing providers need), and
judges every tree in Python, group by group and filter by filter, keeping
the numbers that decided. No SQL per tree: at 10,000 providers the reads
and the judging take a fraction of a second.

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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from allotment.candidates import query, search
from allotment.candidates.engine import Result
from allotment.candidates.request import CandidateRequest, Settings
from allotment.candidates.resolved import GroupIds, NameIds, group_ids
from allotment.db import tables as t
from allotment.ledger import capacity
from allotment.ledger.capacity import InventoryWithUsage

LOG = logging.getLogger(__name__)

# The group of request-wide reasons (root_required, limit, combination).
WHOLE_REQUEST = "*"

# Every ``filter`` a reason may name.
FILTERS = ("unknown_aggregate", "unknown_in_tree", "in_tree", "member_of",
           "forbidden_aggregate", "required_trait", "forbidden_trait", "no_inventory",
           "capacity", "min_unit", "max_unit", "step_size", "root_required",
           "root_forbidden", "group_policy_isolate", "same_subtree", "combination", "limit")


# --- the cloud, read once ----------------------------------------------------

@dataclass(frozen=True, slots=True)
class Provider:
    id: int
    uuid: str
    name: str
    root: int
    parent: int | None


@dataclass
class Cloud:
    """What the judging needs, from ``read_cloud``; never changed afterwards."""

    providers: dict[int, Provider]
    # root -> the providers of its tree, in id order
    trees: dict[int, list[int]]
    # (provider, class) -> inventory, for the requested classes only
    inventory: dict[tuple[int, int], InventoryWithUsage]
    # class -> providers with inventory of it, in id order
    holders: dict[int, list[int]]
    # provider -> the traits it has among those the request names
    traits: dict[int, frozenset[int]]
    # provider -> its aggregates among those the request or sharing need
    aggregates: dict[int, frozenset[int]]
    sharing: frozenset[int]
    # root -> sharing providers of other trees that share an aggregate with it
    shared_with: dict[int, list[int]]

    def traits_of(self, rp: int) -> frozenset[int]:
        return self.traits.get(rp, frozenset())

    def aggregates_of(self, rp: int) -> frozenset[int]:
        return self.aggregates.get(rp, frozenset())


def _in(values: list[int]):
    return sa.bindparam("values", values, expanding=True)


def read_cloud(conn: sa.Connection, classes: Iterable[int], traits: Iterable[int],
               aggregates: Iterable[int], sharing_trait: int | None) -> Cloud:
    """The whole cloud as far as a request can see it, in four statements."""
    rp, rpt, rpa = t.resource_providers, t.resource_provider_traits, \
        t.resource_provider_aggregates
    providers: dict[int, Provider] = {}
    trees: dict[int, list[int]] = {}
    for ident, uuid, name, root, parent in conn.execute(
            sa.select(rp.c.id, rp.c.uuid, rp.c.name, rp.c.root_provider_id,
                      rp.c.parent_provider_id).order_by(rp.c.id)).all():
        root = root if root is not None else ident
        providers[ident] = Provider(ident, uuid, name or uuid, root, parent)
        trees.setdefault(root, []).append(ident)

    inv = t.inventories.alias("explain_inv")
    inventory: dict[tuple[int, int], InventoryWithUsage] = {}
    holders: dict[int, list[int]] = {}
    for row in conn.execute(
            sa.select(inv.c.resource_provider_id, inv.c.resource_class_id, inv.c.total,
                      inv.c.reserved, inv.c.min_unit, inv.c.max_unit, inv.c.step_size,
                      inv.c.allocation_ratio, capacity.usage(inv))
            .where(inv.c.resource_class_id.in_(_in(sorted(set(classes)))))
            .order_by(inv.c.resource_provider_id)).all():
        provider, rc = row[0], row[1]
        inventory[(provider, rc)] = capacity.with_usage(*row[2:])
        holders.setdefault(rc, []).append(provider)

    wanted_traits = set(traits) | ({sharing_trait} if sharing_trait is not None else set())
    found_traits: dict[int, set[int]] = {}
    if wanted_traits:
        for provider, trait in conn.execute(
                sa.select(rpt.c.resource_provider_id, rpt.c.trait_id)
                .where(rpt.c.trait_id.in_(_in(sorted(wanted_traits))))).all():
            found_traits.setdefault(provider, set()).add(trait)
    sharing = frozenset(p for p, ts in found_traits.items() if sharing_trait in ts)

    found_aggs: dict[int, set[int]] = {}
    wanted_aggs = sorted(set(aggregates))
    if wanted_aggs or sharing:
        shared = rpa.alias("explain_shared")
        shares = rpt.alias("explain_shares")
        of_sharing = (sa.select(shared.c.aggregate_id)
                      .join(shares, shares.c.resource_provider_id == shared.c.resource_provider_id)
                      .where(shares.c.trait_id == sa.bindparam("sharing", sharing_trait)))
        for provider, aggregate in conn.execute(
                sa.select(rpa.c.resource_provider_id, rpa.c.aggregate_id)
                .where(sa.or_(rpa.c.aggregate_id.in_(_in(wanted_aggs)),
                              rpa.c.aggregate_id.in_(of_sharing)))).all():
            found_aggs.setdefault(provider, set()).add(aggregate)

    shared_with = _shared_with(providers, found_aggs, sharing)
    return Cloud(providers, trees, inventory, holders,
                 {p: frozenset(ts) for p, ts in found_traits.items()},
                 {p: frozenset(aggs) for p, aggs in found_aggs.items()}, sharing, shared_with)


def _shared_with(providers: dict[int, Provider], aggregates: dict[int, set[int]],
                 sharing: frozenset[int]) -> dict[int, list[int]]:
    """root -> the sharing providers of other trees in an aggregate with one of its providers."""
    members: dict[int, set[int]] = {}
    for provider, aggs in aggregates.items():
        for aggregate in aggs:
            members.setdefault(aggregate, set()).add(provider)
    found: dict[int, set[int]] = {}
    for share in sharing:
        own_root = providers[share].root
        for aggregate in aggregates.get(share, ()):
            for member in members[aggregate]:
                root = providers[member].root
                if root != own_root:
                    found.setdefault(root, set()).add(share)
    return {root: sorted(shares) for root, shares in found.items()}


# --- reasons -----------------------------------------------------------------

@dataclass(frozen=True)
class Reason:
    """One thing that keeps a tree out of the answer."""

    group: str
    filter: str
    detail: str
    provider_uuid: str | None = None
    resource_class: str | None = None
    # requested, capacity, used, free, min_unit, max_unit, step_size where they apply
    numbers: tuple[tuple[str, int], ...] = ()

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

    def name(self, rp: int) -> str:
        return self.cloud.providers[rp].name

    def uuid(self, rp: int) -> str:
        return self.cloud.providers[rp].uuid

    def traits_text(self, traits: Iterable[int]) -> str:
        return ", ".join(sorted(self.trait_names[i] for i in traits))

    def aggs_text(self, aggs: Iterable[int]) -> str:
        return ", ".join(sorted(self.aggregate_uuids[i] for i in aggs))

    def any_of(self, sets: Iterable[frozenset[int]], names) -> str:
        return " and ".join(" or ".join(sorted(names(s))) if len(s) > 1 else names(s)[0]
                            for s in sets)

    def traits_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return self.any_of(sets, lambda s: [self.trait_names[i] for i in s])

    def aggs_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return self.any_of(sets, lambda s: [self.aggregate_uuids[i] for i in s])


def _in_all(have: frozenset[int], sets: tuple[frozenset[int], ...]) -> bool:
    """Every any-of set meets ``have``."""
    return all(have & s for s in sets)


def _room(ctx: _Context, suffix: str, rp: int, rc: int, amount: int) -> list[Reason]:
    """Why ``rp`` cannot give ``amount`` of ``rc`` (empty when it can)."""
    inv = ctx.cloud.inventory[(rp, rc)]
    if inv.fits(amount):
        return []
    name, rc_name, uuid = ctx.name(rp), ctx.class_names[rc], ctx.uuid(rp)
    found = []
    if not capacity.amount_allowed(amount, inv.min_unit, inv.max_unit, inv.step_size):
        if amount < inv.min_unit:
            found.append(Reason(suffix, "min_unit", f"{name} allocates at least "
                                f"{inv.min_unit} {rc_name} at a time, {amount} requested",
                                uuid, rc_name, (("requested", amount),
                                                ("min_unit", inv.min_unit))))
        if amount > inv.max_unit:
            found.append(Reason(suffix, "max_unit", f"{name} allocates at most "
                                f"{inv.max_unit} {rc_name} at a time, {amount} requested",
                                uuid, rc_name, (("requested", amount),
                                                ("max_unit", inv.max_unit))))
        if amount % inv.step_size:
            found.append(Reason(suffix, "step_size", f"{name} allocates {rc_name} in steps "
                                f"of {inv.step_size}, {amount} requested", uuid, rc_name,
                                (("requested", amount), ("step_size", inv.step_size))))
    free = inv.free
    if amount > free:
        found.append(Reason(suffix, "capacity", f"{name} has {max(free, 0)} {rc_name} free "
                            f"of {inv.capacity}, {amount} requested", uuid, rc_name,
                            (("requested", amount), ("capacity", inv.capacity),
                             ("used", inv.used), ("free", free))))
    return found


def _provider_filters(ctx: _Context, group: GroupIds, rp: int, member_of: bool,
                      root_aggs: bool) -> list[Reason]:
    """Why ``rp`` fails the group's trait and aggregate filters itself.

    ``member_of``: check membership on the provider (else the caller did it
    for the tree); ``root_aggs``: membership of the root counts too (the
    unsuffixed group's local providers).
    """
    cloud, suffix = ctx.cloud, group.suffix
    if not (group.tree_root is not None or group.forbidden or group.forbidden_aggs
            or member_of and group.member_of or group.same_provider and group.required):
        return []
    name, uuid = ctx.name(rp), ctx.uuid(rp)
    aggs, traits = cloud.aggregates_of(rp), cloud.traits_of(rp)
    found = []
    if group.tree_root is not None and cloud.providers[rp].root != group.tree_root:
        found.append(Reason(suffix, "in_tree", f"{name} is not in the in_tree provider's "
                            "tree", uuid))
    if member_of and group.member_of:
        root_aggs_of = cloud.aggregates_of(cloud.providers[rp].root) if root_aggs \
            else frozenset()
        if not (_in_all(aggs, group.member_of) or
                (root_aggs and _in_all(root_aggs_of, group.member_of))):
            found.append(Reason(suffix, "member_of", f"{name} is not in aggregate "
                                f"{ctx.aggs_any_of(group.member_of)}", uuid))
    bad = aggs & group.forbidden_aggs
    if bad:
        found.append(Reason(suffix, "forbidden_aggregate", f"{name} is in forbidden "
                            f"aggregate {ctx.aggs_text(bad)}", uuid))
    if group.same_provider:
        unmet = [s for s in group.required if not traits & s]
        if unmet:
            found.append(Reason(suffix, "required_trait", f"{name} lacks required trait "
                                f"{ctx.traits_any_of(unmet)}", uuid))
    bad = traits & group.forbidden
    if bad:
        found.append(Reason(suffix, "forbidden_trait", f"{name} has forbidden trait "
                            f"{ctx.traits_text(bad)}", uuid))
    return found


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
    missing = [rc for rc in classes if not any((rp, rc) in cloud.inventory for rp in pool)]
    for rc in missing:
        judged.reasons.append(_no_inventory(ctx, suffix, root, rc, foreign))
    if missing:
        return judged
    holding = [rp for rp in pool if all((rp, rc) in cloud.inventory for rc in classes)]
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
    name, uuid = ctx.name(root), ctx.uuid(root)
    if group.tree_root is not None and root != group.tree_root:
        judged.reasons.append(Reason("", "in_tree", f"{name} is not the tree of the in_tree "
                                     "provider", uuid))
        return judged
    bad = cloud.aggregates_of(root) & group.forbidden_aggs
    if bad:
        judged.reasons.append(Reason("", "forbidden_aggregate", f"root {name} is in forbidden "
                                     f"aggregate {ctx.aggs_text(bad)}", uuid))
        return judged
    local = cloud.trees[root]
    # With in_tree, providers of other trees do not serve the unsuffixed group.
    foreign = cloud.shared_with.get(root, []) if group.tree_root is None else []
    tree_member = True
    if group.member_of:
        tree_member = _in_all(cloud.aggregates_of(root), group.member_of) or any(
            _in_all(cloud.aggregates_of(rp), group.member_of) for rp in local + foreign)
        if not tree_member:
            aggs = ctx.aggs_any_of(group.member_of)
            judged.reasons.append(Reason("", "member_of", _nobody(
                ctx, root, foreign, f"is in aggregate {aggs}", f"is not in aggregate {aggs}"),
                _lone(ctx, root, foreign)))
    seen: set[Reason] = set(judged.reasons)
    traits: frozenset[int] = frozenset()
    for rc, amount in group.resources:
        pool = [rp for rp in local + foreign if (rp, rc) in cloud.inventory]
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
    unmet = [s for s in group.required if not traits & s]
    if unmet:
        wanted = ctx.traits_any_of(unmet)
        judged.reasons.append(Reason("", "required_trait", _nobody(
            ctx, root, foreign, f"with a requested class has trait {wanted}",
            f"lacks required trait {wanted}"), _lone(ctx, root, foreign)))
    return judged


def _root_filters(ctx: _Context, root: int) -> list[Reason]:
    """root_required, request-wide: the tree's root has / lacks these traits."""
    traits = ctx.cloud.traits_of(root)
    name, uuid = ctx.name(root), ctx.uuid(root)
    found = []
    missing = ctx.root_required - traits
    if missing:
        found.append(Reason(WHOLE_REQUEST, "root_required", f"root {name} lacks required "
                            f"trait {ctx.traits_text(missing)}", uuid))
    bad = ctx.root_forbidden & traits
    if bad:
        found.append(Reason(WHOLE_REQUEST, "root_forbidden", f"root {name} has forbidden "
                            f"trait {ctx.traits_text(bad)}", uuid))
    return found


def _impossible(ctx: _Context, request_group, group: GroupIds) -> Reason:
    """The reason every tree gets for a group that can match nothing anywhere."""
    suffix = group.suffix
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


def _ancestors(cloud: Cloud, rp: int) -> set[int]:
    found = {rp}
    parent = cloud.providers[rp].parent
    while parent is not None and parent not in found:
        found.add(parent)
        parent = cloud.providers[parent].parent
    return found


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
        room = sum(max(cloud.inventory[(rp, rc)].room, 0) for rp in suppliers[rc])
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
        ancestors = {rp: _ancestors(cloud, rp) for s in members for rp in options_of[s]}
        if not any(all(any(top in ancestors[rp] for rp in options_of[s]) for s in members)
                   for first in members for top in options_of[first]):
            found.append(Reason(",".join(members), "same_subtree", f"no provider of {name} "
                                f"has groups {', '.join(members)} within its subtree"))
    return found


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

def _steps(ctx: _Context) -> list[dict[str, Any]]:
    cloud = ctx.cloud
    steps: list[dict[str, Any]] = []

    def step(suffix: str, name: str, providers: Iterable[int], detail: str) -> set[int]:
        kept = set(providers)
        text = detail.format(n=len(kept))
        steps.append({"group": suffix, "filter": name, "providers": len(kept), "detail": text})
        LOG.debug("explain: group '%s' %s: %s", suffix, name, text)
        return kept

    root_of = {rp: p.root for rp, p in cloud.providers.items()}
    for group, request_group in zip(ctx.groups, ctx.request.groups, strict=True):
        suffix = group.suffix
        if not group.possible:
            reason = _impossible(ctx, request_group, group)
            step(suffix, reason.filter, (), "{n} providers: " + reason.detail)
            continue
        with_room = []
        for rc, amount in group.resources:
            rc_name = ctx.class_names[rc]
            holders = cloud.holders.get(rc, [])
            step(suffix, f"inventory:{rc_name}", holders,
                 f"found {{n}} providers with {rc_name} inventory")
            with_room.append(step(
                suffix, f"resources:{rc_name}",
                (rp for rp in holders if cloud.inventory[(rp, rc)].fits(amount)),
                f"found {{n}} providers with available {amount} {rc_name}"))
        if not with_room:
            pool = step(suffix, "providers", cloud.providers, "{n} providers in all")
        elif group.same_provider:
            pool = set.intersection(*with_room)
            if len(with_room) > 1:
                pool = step(suffix, "resources", pool,
                            "{n} providers have room for all of the group's resources")
        else:
            pool = set.union(*with_room)
        unsuffixed = not group.same_provider and bool(group.resources)
        if group.tree_root is not None:
            pool = step(suffix, "in_tree", (rp for rp in pool
                                            if root_of[rp] == group.tree_root),
                        "after filtering by in_tree: {n}")
        if group.member_of:
            pool = step(suffix, "member_of", (
                rp for rp in pool if _in_all(cloud.aggregates_of(rp), group.member_of)
                or unsuffixed and _in_all(cloud.aggregates_of(root_of[rp]), group.member_of)),
                "after filtering by member_of: {n}")
        if group.forbidden_aggs:
            pool = step(suffix, "forbidden_aggregate", (
                rp for rp in pool if not cloud.aggregates_of(rp) & group.forbidden_aggs
                and not (unsuffixed and cloud.aggregates_of(root_of[rp]) & group.forbidden_aggs)),
                "after filtering by forbidden aggregates: {n}")
        if group.required:
            if unsuffixed:
                # The unsuffixed group's traits may come from several providers of a tree.
                tree_traits: dict[int, frozenset[int]] = {}
                for rp in pool:
                    tree_traits[root_of[rp]] = tree_traits.get(root_of[rp], frozenset()) \
                        | cloud.traits_of(rp)
                kept = (rp for rp in pool if _in_all(tree_traits[root_of[rp]], group.required))
            else:
                kept = (rp for rp in pool if _in_all(cloud.traits_of(rp), group.required))
            pool = step(suffix, "required_trait", kept, "after filtering by required traits: {n}")
        if group.forbidden:
            pool = step(suffix, "forbidden_trait", (
                rp for rp in pool if not cloud.traits_of(rp) & group.forbidden),
                "after filtering by forbidden traits: {n}")
        if ctx.root_required:
            pool = step(suffix, "root_required", (
                rp for rp in pool if ctx.root_required <= cloud.traits_of(root_of[rp])
                or rp in cloud.sharing), "after filtering by root_required: {n}")
        if ctx.root_forbidden:
            pool = step(suffix, "root_forbidden", (
                rp for rp in pool if not ctx.root_forbidden & cloud.traits_of(root_of[rp])
                or rp in cloud.sharing), "after filtering by forbidden root traits: {n}")
    return steps


# --- the explanation ----------------------------------------------------------

def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


_SUMMARIES = {
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


def explain(conn: sa.Connection, request: CandidateRequest, result: Result,
            settings: Settings, sample_limit: int = 10,
            check_answered: bool = False) -> Explanation:
    """Why the trees of the cloud are (not) in ``result``, the answer to ``request``.

    Run in the transaction that produced ``result``. Raises what
    ``query.resolve`` raises for unknown names (``engine.find`` raised it first).
    ``check_answered`` also judges the trees in the answer (for tests).
    """
    names: NameIds = query.resolve(conn, request)
    groups = [group_ids(group, names) for group in request.groups]
    cloud = read_cloud(conn, names.classes.values(), names.traits.values(),
                       names.aggregates.values(), names.sharing_trait)
    ctx = _Context(
        request=request, groups=groups, cloud=cloud,
        class_names={rc: name for name, rc in names.classes.items()},
        trait_names={trait: name for name, trait in names.traits.items()},
        aggregate_uuids={agg: uuid for uuid, agg in names.aggregates.items()},
        root_required=frozenset(names.traits[n] for n in request.root_required),
        root_forbidden=frozenset(names.traits[n] for n in request.root_forbidden))
    steps = _steps(ctx)
    impossible = {group.suffix: _impossible(ctx, spec, group)
                  for group, spec in zip(groups, request.groups, strict=True)
                  if not group.possible or not (group.resources or group.required
                                                or group.member_of)}
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
        reasons, judged = _judge_tree(ctx, root, impossible)
        if not reasons:
            options = {rp for _, j in judged for _, opts in j.slots for rp in opts}
            local = any(cloud.providers[rp].root == root for rp in options)
            if not local and any(offer <= options for offer in foreign_offers):
                qualified += 1
                continue
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
