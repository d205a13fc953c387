"""Where the engine's questions are answered: a ``model.State``.

``engine`` asks a ``ModelSource`` a handful of questions (names to ids and the
cloud's layout, whether root_required or a member_of matches any provider,
providers that serve one group alone, the providers that serve each part of a
request (one class of one group), sharing anchors, tree shapes, summaries).
``ModelSource`` answers
them from a state: the worker's read model brought up to date at the start
of the request, or (``[allotment] candidates_source = database``) one loaded
from the tables for this request alone.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet

from allotment.candidates import rules
from allotment.candidates.model import Provider, State
from allotment.candidates.request import CandidateRequest
from allotment.candidates.resolved import (
    SHARING_TRAIT,
    Anchor,
    GroupIds,
    Layout,
    Match,
    NameIds,
    ProviderSummary,
    Roots,
    canonical_parts,
)
from allotment.ledger.common import STANDARD_CLASS_IDS

Check = Callable[[Provider], bool]


class ModelSource:
    """The engine's answers from a state (see ``model``)."""

    def __init__(self, state: State) -> None:
        self.state = state
        self._with_room: dict[tuple[int, int], set[int]] = {}

    def with_room(self, rc: int, amount: int) -> set[int]:
        """The providers with room for ``amount`` of ``rc`` (``Fits``, a pass over
        its holders with ``Fits.times_each``), asked once per source."""
        found = self._with_room.get((rc, amount))
        if found is None:
            holders = self.state.sorted_holders(rc)
            counts = rules.Fits(rc, amount).times_each(
                [self.state.providers[rp] for rp in holders])
            found = self._with_room[(rc, amount)] = {
                rp for rp, count in zip(holders, counts, strict=True) if count}
        return found

    # --- names and layout ------------------------------------------------

    def resolve(self, request: CandidateRequest) -> NameIds:
        state = self.state
        wanted = request.requested_classes()
        names = NameIds(classes={n: STANDARD_CLASS_IDS[n] for n in wanted
                                 if n in STANDARD_CLASS_IDS})
        names.classes.update({n: state.class_ids[n] for n in wanted
                              if n not in names.classes and n in state.class_ids})
        trait_names = set(request.root_required | request.root_forbidden) | {SHARING_TRAIT}
        for group in request.groups:
            trait_names |= group.forbidden.union(*group.required)
            names.aggregates.update(
                {u: state.aggregate_ids[u] for u in group.forbidden_aggs.union(*group.member_of)
                 if u in state.aggregate_ids})
            if group.in_tree and group.in_tree in state.by_uuid:
                names.tree_roots[group.in_tree] = state.providers[
                    state.by_uuid[group.in_tree]].root
        names.traits = {n: state.trait_ids[n] for n in trait_names if n in state.trait_ids}
        names.sharing_trait = names.traits.get(SHARING_TRAIT)
        classes = [state.class_ids[n] for n in wanted if n in state.class_ids]
        holders = [state.holders.get(rc, set()) for rc in classes]
        nested_holds = any(not holding.isdisjoint(state.nested) for holding in holders)
        sharing_holds = False
        if names.sharing_trait is not None:
            sharing = state.with_trait.get(names.sharing_trait, set())
            sharing_holds = any(not holding.isdisjoint(sharing) for holding in holders)
        names.layout = Layout(has_trees=bool(state.nested),
                              spread_possible=nested_holds or sharing_holds)
        return names

    # --- where upstream stops before an unknown name (``resolved.refuse_unknown``)

    def roots_match(self, roots: Roots) -> bool:
        rule = rules.root_traits(roots, self.state)
        providers = self.state.providers
        return rule is None or any(rule.passes(providers[root]) for root in self.state.trees)

    def aggregates_match(self, member_of: tuple[frozenset[int], ...]) -> bool:
        sets = rules.MemberOf(member_of).narrow(self.state)
        if not sets:
            return True
        sets.sort(key=len)
        return bool(set(sets[0]).intersection(*sets[1:]))

    # --- filters: the rule book's, on this state ----------------------------

    def _root_ok(self, roots: Roots) -> Check | None:
        rule = rules.root_traits(roots, self.state)
        return rule.passes if rule is not None else None

    # --- single providers ------------------------------------------------

    def _filtered(self, group: GroupIds) -> set[int]:
        """Providers with every class of the group that pass its trait, aggregate
        and in_tree rules: the rules' set forms, on the state's indexes (C speed)."""
        state = self.state
        sets: list[set[int]] = [state.holders.get(rc, _EMPTY) for rc, _ in group.resources]
        excluded: list[set[int]] = []
        for rule in rules.provider_rules(group):
            if isinstance(rule, rules.RequiredTraits | rules.MemberOf):
                sets += rule.narrow(state)
            elif isinstance(rule, rules.ForbiddenTraits | rules.ForbiddenAggregates):
                excluded.append(rule.excluded(state))
        if group.tree_root is not None:
            sets += rules.InTree(group.tree_root).narrow(state)
        sets.sort(key=len)
        found = set(sets[0])
        for other in sets[1:]:
            found &= other
        for other in excluded:
            found -= other
        return found

    def _singles(self, group: GroupIds, roots: Roots, limit: int | None,
                 rng: random.Random | None) -> list[Provider]:
        """The group's trait, aggregate and in_tree rules (on the indexes), then
        room for every class, then root_required, in id order (or at random)
        until ``limit``."""
        filtered = self._filtered(group)
        pool = sorted(filtered) if rng is None else list(filtered)
        root_ok = self._root_ok(roots)
        fits = [rules.Fits(rc, amount).passes for rc, amount in group.resources]
        providers = self.state.providers
        found: list[Provider] = []
        for rp in _order(pool, limit, rng):
            provider = providers[rp]
            for room in fits:
                if not room(provider):
                    break
            else:
                if root_ok is None or root_ok(provider):
                    found.append(provider)
                    if limit is not None and len(found) >= limit:
                        break
        return found

    def every_single(self, group: GroupIds, roots: Roots) -> list[int]:
        """Every provider that serves the group alone, in id order: ``_singles``
        without a limit, by sets (``with_room``)."""
        state = self.state
        pool = self._filtered(group)
        for rc, amount in group.resources:
            pool &= self.with_room(rc, amount)
        root_ok = self._root_ok(roots)
        found = sorted(pool)
        return found if root_ok is None else [rp for rp in found if root_ok(state.providers[rp])]

    def single_holders(self, group: GroupIds, roots: Roots) -> list[Provider]:
        """The providers that hold every class of the group and pass all its rules
        but capacity (traits, aggregates, in_tree, root_required), in id order:
        the single path's candidates before room is judged (headroom judges how
        much room)."""
        root_ok = self._root_ok(roots)
        providers = self.state.providers
        found = [providers[rp] for rp in sorted(self._filtered(group))]
        return found if root_ok is None else [p for p in found if root_ok(p)]

    def single_providers(self, group: GroupIds, roots: Roots, limit: int | None,
                         rng: random.Random | None) -> list[tuple[int, int]]:
        return [(p.id, p.root) for p in self._singles(group, roots, limit, rng)]

    def single_trees(self, group: GroupIds, roots: Roots, limit: int | None
                     ) -> dict[int, ProviderSummary]:
        found = self._singles(group, roots, limit, None)
        return self.summaries(roots=[p.id for p in found])

    # --- matches: who serves each part ------------------------------------------------------

    def match(self, groups: list[GroupIds], sharing_trait: int | None, roots: Roots,
              unsuffixed_traits: list[int], among: Sequence[int] | None = None
              ) -> list[Match]:
        """Providers part by part (a part: one class of one group, or a resourceless
        group), in provider id order: those with room that pass the group's rules
        (``rules.group_rules``) at home or as a sharing provider of other trees.
        ``among``: only these providers (in id order), not the whole state."""
        canonical = canonical_parts(groups)
        rows: list[Match] = []
        part = 0
        for group in groups:
            group_rules = rules.group_rules(group, self.state, sharing_trait, roots)
            # A part equal to an earlier one is not asked again.
            if not group.resources:
                if canonical[part] == part:
                    self._resourceless_rows(part, group_rules, rows, among)
                part += 1
                continue
            for rc, amount in group.resources:
                if canonical[part] == part:
                    self._class_rows(part, group, rc, amount, group_rules,
                                     unsuffixed_traits, rows, among)
                part += 1
        return rows

    def _resourceless_rows(self, part: int, group_rules: rules.GroupRules,
                           rows: list[Match], among: Sequence[int] | None) -> None:
        """A resourceless group's part: every provider that passes its rules."""
        state = self.state
        for rp in sorted(state.providers) if among is None else among:
            p = state.providers[rp]
            if group_rules.serves_anywhere(p):
                home = group_rules.serves_home(p)
                shares = group_rules.serves_others(p)
                if home or shares:
                    rows.append(Match(part, rp, p.root, None, 0, 0, home, shares))

    def _class_rows(self, part: int, group: GroupIds, rc: int, amount: int,
                    group_rules: rules.GroupRules, unsuffixed_traits: list[int],
                    rows: list[Match], among: Sequence[int] | None) -> None:
        """One (group, class) part: the holders of ``rc`` with room for ``amount``
        that pass the group's rules, in id order (the hot loop of a search)."""
        state = self.state
        if among is None:
            holders: Iterable[int] = state.sorted_holders(rc)
        else:
            holding = state.holders.get(rc, _EMPTY)
            holders = [rp for rp in among if rp in holding]
        unsuffixed = not group.same_provider
        fits = rules.Fits(rc, amount).passes
        anywhere, home_ok = group_rules.serves_anywhere, group_rules.serves_home
        others_ok = group_rules.serves_others
        for rp in holders:
            p = state.providers[rp]
            if not fits(p) or not anywhere(p):
                continue
            home = home_ok(p)
            shares = others_ok(p)
            if not (home or shares):
                continue
            traits = 0
            if unsuffixed:
                for i, trait in enumerate(unsuffixed_traits):
                    if trait in p.traits:
                        traits |= 1 << i
            rows.append(Match(part, rp, p.root, rc, p.inventories[rc].room, traits,
                                 home, shares))

    # --- sharing, trees, summaries -----------------------------------------

    def tree_windows(self, first: int, leave_out: AbstractSet[int]
                     ) -> Iterator[tuple[set[int], list[int]]]:
        """The trees in root id order, a window at a time: ``first`` roots, then
        twice as many as the window before. For each window its roots, and the
        providers of its trees but ``leave_out``, in id order."""
        state = self.state
        ordered = state.sorted_roots()
        start, size = 0, max(first, 1)
        while start < len(ordered):
            window = ordered[start:start + size]
            providers: list[int] = []
            for root in window:
                providers += state.trees[root]
            if leave_out:
                providers = [rp for rp in providers if rp not in leave_out]
            providers.sort()
            yield set(window), providers
            start += size
            size *= 2

    def sharing_anchors(self, providers: Iterable[int], roots: Roots,
                        forbidden_aggs: frozenset[int], within: Iterable[int] | None = None
                        ) -> dict[int, list[Anchor]]:
        """Per sharing provider, the trees it reaches: every tree with a provider
        in one of its aggregates (its own included), each with whether its root
        passes root_required and lies in ``forbidden_aggs``. ``within``: only
        these trees (by root), found from their side."""
        state = self.state
        root_ok = self._root_ok(roots)
        outside = rules.RootOutsideAggregates(forbidden_aggs, state).passes \
            if forbidden_aggs else None
        reached = self._reached(providers) if within is None \
            else self._reached_within(providers, within)
        found: dict[int, list[Anchor]] = {}
        for rp, anchor_roots in reached:
            anchors = []
            for root in sorted(anchor_roots):
                root_provider = state.providers.get(root)
                ok = root_ok is None or (root_provider is not None and root_ok(root_provider))
                bad = outside is not None and root_provider is not None and \
                    not outside(root_provider)
                anchors.append(Anchor(root=root, root_ok=ok, bad=bad))
            if anchors:
                found[rp] = anchors
        return found

    def _reached(self, providers: Iterable[int]) -> Iterator[tuple[int, set[int]]]:
        """Each sharing provider (in id order) and the roots of the members of its
        aggregates."""
        state = self.state
        for rp in sorted(set(providers)):
            sharer = state.providers.get(rp)
            if sharer is None:
                continue
            anchor_roots: set[int] = set()
            for agg in sharer.aggregates:
                anchor_roots |= {state.providers[m].root for m in state.members.get(agg, ())}
            yield rp, anchor_roots

    def _reached_within(self, providers: Iterable[int], within: Iterable[int]
                        ) -> Iterator[tuple[int, set[int]]]:
        """``_reached``, only the roots ``within``: from each of their trees'
        providers' aggregates to the sharing providers in them (a window of
        trees costs its own size, not the cloud's)."""
        state = self.state
        sharers_in: dict[int, list[int]] = {}
        for rp in sorted(set(providers)):
            sharer = state.providers.get(rp)
            if sharer is not None:
                for agg in sharer.aggregates:
                    sharers_in.setdefault(agg, []).append(rp)
        reached: dict[int, set[int]] = {}
        if sharers_in:
            for root in within:
                for member in state.trees.get(root, ()):
                    for agg in state.providers[member].aggregates:
                        for rp in sharers_in.get(agg, ()):
                            reached.setdefault(rp, set()).add(root)
        for rp in sorted(reached):
            yield rp, reached[rp]

    def tree_parents(self, roots: Iterable[int]) -> dict[int, int | None]:
        state = self.state
        return {rp: state.providers[rp].parent for root in set(roots)
                for rp in state.trees.get(root, ())}

    def summaries(self, roots: Iterable[int] = (), providers: Iterable[int] = ()
                  ) -> dict[int, ProviderSummary]:
        state = self.state
        chosen: set[int] = set()
        for root in roots:
            chosen |= state.trees.get(root, set())
        chosen |= {rp for rp in providers if rp in state.providers}
        found: dict[int, ProviderSummary] = {}
        for rp in sorted(chosen):
            p = state.providers[rp]
            resources, traits, rendered = state.summary_parts(p)
            found[rp] = ProviderSummary(rp, p.uuid, p.parent, p.root, resources, traits,
                                        rendered=rendered)
        for summary in found.values():
            parent = found.get(summary.parent_id) if summary.parent_id is not None else None
            root_summary = found.get(summary.root_id)
            summary.parent_uuid = parent.uuid if parent else None
            summary.root_uuid = root_summary.uuid if root_summary else None
        return found

    def provider_uuids(self, ids: Iterable[int]) -> dict[int, str]:
        state = self.state
        return {rp: state.providers[rp].uuid for rp in ids if rp in state.providers}


_EMPTY: set[int] = set()


def _order(pool: list[int], limit: int | None, rng: random.Random | None) -> Iterator[int]:
    """``pool`` in id order, or in a random order drawn lazily.

    A random prefix of twice the limit first (``sample`` costs what it draws),
    then, if too few of those served, the rest shuffled: together a uniformly
    random permutation, without shuffling all of a large pool for a small limit.
    """
    if rng is None:
        yield from pool
        return
    if limit is None or 2 * limit >= len(pool):
        yield from rng.sample(pool, len(pool))
        return
    first = rng.sample(range(len(pool)), 2 * limit)
    for index in first:
        yield pool[index]
    drawn = set(first)
    rest = [rp for index, rp in enumerate(pool) if index not in drawn]
    rng.shuffle(rest)
    yield from rest
