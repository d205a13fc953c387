"""The rule book: every filter of an allocation-candidates request, once.

Each rule is a named test of one provider of the read model's ``State``
(``model.Provider``: its traits, aggregates, inventories and root). It says
whether the provider passes (``passes``, the engine's hot path) and, asked in
trace mode, why not (``why_not``: the ``Refusal``s, with the ids and numbers
that decided). The engine (``sources.ModelSource``) selects providers with
``passes``, and with ``narrow``, the same test on the state's indexes for
whole sets at once; explain runs ``why_not`` on the very state that answered
and only words the refusals. A rule changed here changes both.

Rules between providers of a tree and between groups (the unsuffixed group's
traits from several providers, ``group_policy=isolate``, ``same_subtree``, one
provider per tree before 1.29) are in ``search.Rules``; the capacity rule
itself is ``ledger.capacity.fits``, which the claim uses too.

The filter names are those explain reports (``reasons.FILTERS``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from allotment.candidates.model import Provider, State
from allotment.candidates.resolved import GroupIds, Roots
from allotment.ledger import capacity


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why one provider fails one rule."""

    filter: str
    # The traits or aggregates that decided: a forbidden one present, or the
    # any-of sets none of which is met (one set per required entry).
    sets: tuple[frozenset[int], ...] = ()
    # For the capacity and unit rules: requested, capacity, used, free,
    # min_unit, max_unit, step_size, as they apply.
    numbers: tuple[tuple[str, int], ...] = ()
    # The provider's root decided (root_required, the unsuffixed group's
    # forbidden aggregates on its own tree), not the provider itself.
    on_root: bool = False

    @property
    def ids(self) -> frozenset[int]:
        return frozenset().union(*self.sets)


class Rule(Protocol):
    @property
    def filter(self) -> str: ...

    def passes(self, provider: Provider) -> bool: ...

    def why_not(self, provider: Provider) -> list[Refusal]: ...


def _met(have: frozenset[int], sets: tuple[frozenset[int], ...]) -> bool:
    """Every any-of set meets ``have``."""
    # A loop, not all(): this runs per provider in the engine's hottest path.
    for any_of in sets:  # noqa: SIM110
        if have.isdisjoint(any_of):
            return False
    return True


def _union(index: Mapping[int, set[int]], keys: frozenset[int]) -> set[int]:
    if len(keys) == 1:
        return index.get(next(iter(keys)), _EMPTY)
    return set().union(*(index.get(key, _EMPTY) for key in keys))


_EMPTY: set[int] = set()


# --- traits and aggregates of the provider itself --------------------------------

@dataclass(frozen=True, slots=True)
class RequiredTraits:
    """``required``: for each entry, the provider has one of its traits."""

    sets: tuple[frozenset[int], ...]
    filter: str = "required_trait"

    def passes(self, provider: Provider) -> bool:
        return _met(provider.traits, self.sets)

    def met_by(self, traits: frozenset[int]) -> bool:
        """The rule holds for ``traits`` (the unsuffixed group's: those of every
        provider it takes from in a tree together)."""
        return _met(traits, self.sets)

    def why_not(self, provider: Provider) -> list[Refusal]:
        return self.unmet(provider.traits)

    def unmet(self, traits: frozenset[int]) -> list[Refusal]:
        missing = tuple(s for s in self.sets if traits.isdisjoint(s))
        return [Refusal(self.filter, missing)] if missing else []

    def narrow(self, state: State) -> list[set[int]]:
        """The providers of each entry (the passing ones are in all of them)."""
        return [_union(state.with_trait, any_of) for any_of in self.sets]


@dataclass(frozen=True, slots=True)
class ForbiddenTraits:
    """``required=!T``: the provider has none of these traits."""

    traits: frozenset[int]
    filter: str = "forbidden_trait"

    def passes(self, provider: Provider) -> bool:
        return provider.traits.isdisjoint(self.traits)

    def why_not(self, provider: Provider) -> list[Refusal]:
        bad = provider.traits & self.traits
        return [Refusal(self.filter, (bad,))] if bad else []

    def excluded(self, state: State) -> set[int]:
        return _union(state.with_trait, self.traits)


@dataclass(frozen=True, slots=True)
class MemberOf:
    """``member_of``: for each entry, the provider is in one of its aggregates
    (``with_root``: or its root is, as for the unsuffixed group's own tree)."""

    sets: tuple[frozenset[int], ...]
    # Only a rule ``with_root`` needs the state (to find the root).
    state: State | None = field(default=None, compare=False, repr=False)
    with_root: bool = False
    filter: str = "member_of"

    def passes(self, provider: Provider) -> bool:
        if _met(provider.aggregates, self.sets):
            return True
        return (self.with_root and self.state is not None
                and _met(_root_aggregates(self.state, provider), self.sets))

    def why_not(self, provider: Provider) -> list[Refusal]:
        return [] if self.passes(provider) else [Refusal(self.filter, self.sets)]

    def narrow(self, state: State) -> list[set[int]]:
        return [_union(state.members, any_of) for any_of in self.sets]


@dataclass(frozen=True, slots=True)
class ForbiddenAggregates:
    """``member_of=!in:``: the provider is in none of these aggregates."""

    aggregates: frozenset[int]
    filter: str = "forbidden_aggregate"

    def passes(self, provider: Provider) -> bool:
        return provider.aggregates.isdisjoint(self.aggregates)

    def why_not(self, provider: Provider) -> list[Refusal]:
        bad = provider.aggregates & self.aggregates
        return [Refusal(self.filter, (bad,))] if bad else []

    def excluded(self, state: State) -> set[int]:
        return _union(state.members, self.aggregates)


@dataclass(frozen=True, slots=True)
class RootOutsideAggregates:
    """The unsuffixed group's forbidden aggregates, on the tree's root."""

    aggregates: frozenset[int]
    state: State = field(compare=False, repr=False)
    filter: str = "forbidden_aggregate"

    def passes(self, provider: Provider) -> bool:
        return _root_aggregates(self.state, provider).isdisjoint(self.aggregates)

    def why_not(self, provider: Provider) -> list[Refusal]:
        bad = _root_aggregates(self.state, provider) & self.aggregates
        return [Refusal(self.filter, (bad,), on_root=True)] if bad else []


@dataclass(frozen=True, slots=True)
class InTree:
    """``in_tree``: the provider is in the tree of this root."""

    root: int
    filter: str = "in_tree"

    def passes(self, provider: Provider) -> bool:
        return provider.root == self.root

    def why_not(self, provider: Provider) -> list[Refusal]:
        return [] if provider.root == self.root else [Refusal(self.filter)]

    def narrow(self, state: State) -> list[set[int]]:
        return [state.trees.get(self.root, _EMPTY)]


@dataclass(frozen=True, slots=True)
class RootTraits:
    """``root_required``, request-wide: the provider's root has every required
    trait and none of the forbidden ones."""

    required: frozenset[int]
    forbidden: frozenset[int]
    state: State = field(compare=False, repr=False)
    filter: str = "root_required"  # "root_forbidden" for a rule of forbidden traits only

    def passes(self, provider: Provider) -> bool:
        traits = _root_traits(self.state, provider)
        return self.required <= traits and traits.isdisjoint(self.forbidden)

    def why_not(self, provider: Provider) -> list[Refusal]:
        traits = _root_traits(self.state, provider)
        found = []
        missing = self.required - traits
        if missing:
            found.append(Refusal("root_required", (missing,), on_root=True))
        bad = self.forbidden & traits
        if bad:
            found.append(Refusal("root_forbidden", (bad,), on_root=True))
        return found


@dataclass(frozen=True, slots=True)
class SharesAcrossTrees:
    """A provider that serves ``group`` in trees other than its own: it has
    MISC_SHARES_VIA_AGGREGATE and, for the unsuffixed group with member_of,
    is itself in those aggregates. Where it serves another tree, its own
    root decides neither root_required nor the unsuffixed group's aggregates
    (``sharing_escape`` says for which groups)."""

    sharing_trait: int
    # The unsuffixed group's member_of (empty for a granular group).
    member_of: tuple[frozenset[int], ...] = ()
    filter: str = "sharing"

    def passes(self, provider: Provider) -> bool:
        return self.sharing_trait in provider.traits and _met(provider.aggregates,
                                                              self.member_of)

    def why_not(self, provider: Provider) -> list[Refusal]:
        # Only asked of sharing providers: the aggregates are what failed.
        return [] if self.passes(provider) else [Refusal("member_of", self.member_of)]


def sharing_escape(group: GroupIds, sharing_trait: int | None) -> SharesAcrossTrees | None:
    """Who serves ``group`` across trees; None when no one does: no provider
    shares, or the unsuffixed group is held to one tree by in_tree."""
    if sharing_trait is None:
        return None
    if group.same_provider:
        return SharesAcrossTrees(sharing_trait)
    if group.tree_root is not None:
        return None
    return SharesAcrossTrees(sharing_trait, group.member_of)


def root_traits(roots: Roots, state: State) -> RootTraits | None:
    if not roots:
        return None
    return RootTraits(frozenset(roots.required), frozenset(roots.forbidden), state)


def _root_aggregates(state: State, provider: Provider) -> frozenset[int]:
    root = state.providers.get(provider.root)
    return root.aggregates if root is not None else frozenset()


def _root_traits(state: State, provider: Provider) -> frozenset[int]:
    root = state.providers.get(provider.root)
    return root.traits if root is not None else frozenset()


# --- capacity -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Fits:
    """``resources=RC:amount``: the provider has an inventory of the class with
    room for the amount, within its unit rules (``capacity.fits``)."""

    class_id: int
    amount: int
    filter: str = "capacity"

    def passes(self, provider: Provider) -> bool:
        inventory = provider.inventories.get(self.class_id)
        return inventory is not None and inventory.fits(self.amount)

    def times(self, provider: Provider) -> int:
        """How many allocations of the amount the provider takes one after
        another (``capacity.how_many``; 0 without an inventory of the class)."""
        inventory = provider.inventories.get(self.class_id)
        return inventory.how_many(self.amount) if inventory is not None else 0

    def times_each(self, holders: Sequence[Provider]) -> list[int]:
        """``times`` of each of ``holders`` (providers with an inventory of the
        class), in order (``capacity.how_many_each``)."""
        rc = self.class_id
        return capacity.how_many_each(self.amount, [p.inventories[rc] for p in holders])

    def why_not(self, provider: Provider) -> list[Refusal]:
        inventory = provider.inventories.get(self.class_id)
        if inventory is None:
            return [Refusal("no_inventory")]
        if inventory.fits(self.amount):
            return []
        amount = self.amount
        found = []
        if not capacity.amount_allowed(amount, inventory.min_unit, inventory.max_unit,
                                       inventory.step_size):
            if amount < inventory.min_unit:
                found.append(Refusal("min_unit", numbers=(
                    ("requested", amount), ("min_unit", inventory.min_unit))))
            if amount > inventory.max_unit:
                found.append(Refusal("max_unit", numbers=(
                    ("requested", amount), ("max_unit", inventory.max_unit))))
            if amount % inventory.step_size:
                found.append(Refusal("step_size", numbers=(
                    ("requested", amount), ("step_size", inventory.step_size))))
        free = inventory.free
        if amount > free:
            found.append(Refusal("capacity", numbers=(
                ("requested", amount), ("capacity", inventory.capacity),
                ("used", inventory.used), ("free", free))))
        return found


# --- a group's rules ---------------------------------------------------------------

def provider_rules(group: GroupIds) -> list[Rule]:
    """A granular (or resourceless) group's traits and aggregates: each must hold
    on the one provider that serves the group."""
    rules: list[Rule] = []
    if group.member_of:
        rules.append(MemberOf(group.member_of))
    if group.forbidden_aggs:
        rules.append(ForbiddenAggregates(group.forbidden_aggs))
    if group.required:
        rules.append(RequiredTraits(group.required))
    if group.forbidden:
        rules.append(ForbiddenTraits(group.forbidden))
    return rules


def unsuffixed_exclusions(group: GroupIds) -> list[Rule]:
    """The unsuffixed group's filters that exclude a provider wherever it serves:
    forbidden traits and aggregates of its own (required traits count for the
    tree, in ``search.Rules``)."""
    rules: list[Rule] = []
    if group.forbidden:
        rules.append(ForbiddenTraits(group.forbidden))
    if group.forbidden_aggs:
        rules.append(ForbiddenAggregates(group.forbidden_aggs))
    return rules


def unsuffixed_local(group: GroupIds, state: State) -> list[Rule]:
    """The unsuffixed group's filters on a provider serving its own tree: it or
    its root in the member_of aggregates, its root outside the forbidden ones.
    (A sharing provider serving other trees is judged by its aggregates
    instead.)"""
    rules: list[Rule] = []
    if group.member_of:
        rules.append(MemberOf(group.member_of, state, with_root=True))
    if group.forbidden_aggs:
        rules.append(RootOutsideAggregates(group.forbidden_aggs, state))
    return rules


# --- everything a provider must pass to serve one group ---------------------------

@dataclass(frozen=True)
class GroupRules:
    """The rules a provider must pass to serve one request group: what the
    engine's match applies (``sources.ModelSource.match``) and what explain
    asks why not of the providers of the trees the engine left out.

    ``anywhere``: wherever the provider serves (a granular group's traits and
    aggregates; the unsuffixed group's exclusions). ``at_home``: also when it
    serves its own tree (root_required; the unsuffixed group's membership,
    which its root may give, and forbidden aggregates of its root). A
    provider that passes ``shares`` (``sharing_escape``) may serve other
    trees instead, where its own root decides nothing. Each list is in the
    order explain counts its steps.
    """

    anywhere: tuple[Rule, ...]
    at_home: tuple[Rule, ...]
    shares: SharesAcrossTrees | None

    def serves_anywhere(self, provider: Provider) -> bool:
        for rule in self.anywhere:  # noqa: SIM110 (the match's hot loop)
            if not rule.passes(provider):
                return False
        return True

    def serves_home(self, provider: Provider) -> bool:
        """It may serve its own tree (given ``serves_anywhere``)."""
        for rule in self.at_home:  # noqa: SIM110
            if not rule.passes(provider):
                return False
        return True

    def serves_others(self, provider: Provider) -> bool:
        """It may serve trees it reaches through its aggregates."""
        return self.shares is not None and self.shares.passes(provider)

    def why_not(self, provider: Provider, home: bool) -> list[Refusal]:
        """Why ``provider`` cannot serve the group in its own tree (``home``) or
        in another tree it reaches."""
        found = [refusal for rule in self.anywhere for refusal in rule.why_not(provider)]
        if home:
            found += [refusal for rule in self.at_home for refusal in rule.why_not(provider)]
        elif self.shares is not None:
            found += self.shares.why_not(provider)
        return found


def group_rules(group: GroupIds, state: State, sharing_trait: int | None,
                roots: Roots) -> GroupRules:
    """The rules of ``group`` (see ``GroupRules``)."""
    at_home: list[Rule] = []
    if not group.resources:
        anywhere = provider_rules(group)  # a resourceless group names any provider
    elif group.same_provider:
        anywhere = provider_rules(group)
        if group.tree_root is not None:
            anywhere.insert(0, InTree(group.tree_root))
    else:
        anywhere = unsuffixed_exclusions(group)
        if group.tree_root is not None:
            anywhere.insert(0, InTree(group.tree_root))
        at_home += unsuffixed_local(group, state)
    if roots.required:
        at_home.append(RootTraits(frozenset(roots.required), frozenset(), state))
    if roots.forbidden:
        at_home.append(RootTraits(frozenset(), frozenset(roots.forbidden), state,
                                  filter="root_forbidden"))
    return GroupRules(tuple(anywhere), tuple(at_home), sharing_escape(group, sharing_trait))
