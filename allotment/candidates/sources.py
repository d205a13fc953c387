"""Where the engine's questions are answered: the tables, or the read model.

``engine`` asks a ``Source`` a handful of questions (names to ids and the
cloud's layout, providers that serve one group alone, match rows per group
and class, sharing anchors, tree shapes, summaries). ``DatabaseSource`` asks
the database, in the request's transaction (``query`` and ``summaries``: the
reference path, ``[allotment] candidates_source = database``);
``ModelSource`` answers the same questions, with the same results, from a
worker's ``model.State`` brought up to date at the start of the request.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple, Protocol

import sqlalchemy as sa

from allotment.candidates import query, summaries
from allotment.candidates.model import Provider, State
from allotment.candidates.request import CandidateRequest
from allotment.candidates.resolved import (
    SHARING_TRAIT,
    Anchor,
    GroupIds,
    Layout,
    MatchFlag,
    MatchRow,
    NameIds,
    Roots,
    canonical_parts,
    refuse_unknown,
)
from allotment.candidates.summaries import ProviderSummary
from allotment.ledger.common import STANDARD_CLASS_IDS


class Source(Protocol):
    def resolve(self, request: CandidateRequest) -> NameIds: ...

    def single_trees(self, group: GroupIds, roots: Roots, limit: int | None
                     ) -> dict[int, ProviderSummary]: ...

    def single_providers(self, group: GroupIds, roots: Roots, limit: int | None,
                         rng: random.Random | None) -> list[tuple[int, int]]: ...

    def match(self, groups: list[GroupIds], sharing_trait: int | None, roots: Roots,
              unsuffixed_traits: list[int]) -> list[MatchRow]: ...

    def sharing_anchors(self, providers: Iterable[int], roots: Roots,
                        forbidden_aggs: frozenset[int]) -> dict[int, list[Anchor]]: ...

    def tree_parents(self, roots: Iterable[int]) -> dict[int, int | None]: ...

    def summaries(self, roots: Iterable[int] = (), providers: Iterable[int] = ()
                  ) -> dict[int, ProviderSummary]: ...

    def provider_uuids(self, ids: Iterable[int]) -> dict[int, str]: ...


class DatabaseSource:
    """The reference: every answer read from the tables in ``conn``'s transaction."""

    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def resolve(self, request: CandidateRequest) -> NameIds:
        return query.resolve(self.conn, request)

    def single_trees(self, group: GroupIds, roots: Roots, limit: int | None
                     ) -> dict[int, ProviderSummary]:
        return summaries.single_trees(self.conn, group, roots, limit)

    def single_providers(self, group: GroupIds, roots: Roots, limit: int | None,
                         rng: random.Random | None) -> list[tuple[int, int]]:
        return query.single_providers(self.conn, group, roots, limit,
                                      random_order=rng is not None)

    def match(self, groups: list[GroupIds], sharing_trait: int | None, roots: Roots,
              unsuffixed_traits: list[int]) -> list[MatchRow]:
        return query.match(self.conn, groups, sharing_trait, roots, unsuffixed_traits)

    def sharing_anchors(self, providers: Iterable[int], roots: Roots,
                        forbidden_aggs: frozenset[int]) -> dict[int, list[Anchor]]:
        return query.sharing_anchors(self.conn, providers, roots, forbidden_aggs)

    def tree_parents(self, roots: Iterable[int]) -> dict[int, int | None]:
        return query.tree_parents(self.conn, roots)

    def summaries(self, roots: Iterable[int] = (), providers: Iterable[int] = ()
                  ) -> dict[int, ProviderSummary]:
        return summaries.summaries(self.conn, roots=roots, providers=providers)

    def provider_uuids(self, ids: Iterable[int]) -> dict[int, str]:
        return summaries.provider_uuids(self.conn, ids)


Check = Callable[[Provider], bool]


class _Flagging(NamedTuple):
    """How one group's match rows are flagged and kept (``ModelSource._flagging``)."""

    member: Callable[[frozenset[int]], bool] | None
    flags_of: Callable[[Provider], int]
    escape: Callable[[Provider, int], bool]
    gate: Callable[[Provider, int], bool]

SHARING_FLAG = MatchFlag.SHARING.value
ROOT_OK_FLAG = MatchFlag.ROOT_OK.value
MEMBER_FLAG = MatchFlag.MEMBER.value
ROOT_MEMBER_FLAG = MatchFlag.ROOT_MEMBER.value
ROOT_BAD_FLAG = MatchFlag.ROOT_BAD.value


class ModelSource:
    """The same answers from a read model's state (see ``model``).

    Each method mirrors the statement it stands for in ``query`` or
    ``summaries``; the tests compare the two on random clouds and requests.
    """

    def __init__(self, state: State) -> None:
        self.state = state

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
        refuse_unknown(request, names)
        return names

    # --- filters, as predicates on a provider ------------------------------

    def _root_ok(self, roots: Roots) -> Callable[[Provider], bool] | None:
        if not roots:
            return None
        required = frozenset(roots.required)
        forbidden = frozenset(roots.forbidden)
        providers = self.state.providers

        def ok(provider: Provider) -> bool:
            root = providers.get(provider.root)
            traits = root.traits if root is not None else frozenset()
            return required <= traits and traits.isdisjoint(forbidden)
        return ok

    @staticmethod
    def _member(group: GroupIds) -> Callable[[frozenset[int]], bool] | None:
        if not group.member_of:
            return None
        sets = group.member_of
        return lambda aggs: all(not aggs.isdisjoint(s) for s in sets)

    def _provider_filters(self, group: GroupIds) -> list[Check]:
        """``query._provider_filters``: the group's traits and aggregates on one provider."""
        checks: list[Check] = [_has_any_trait(any_of) for any_of in group.required]
        if group.forbidden:
            checks.append(_lacks_traits(group.forbidden))
        checks += [_in_any_aggregate(any_of) for any_of in group.member_of]
        if group.forbidden_aggs:
            checks.append(_outside_aggregates(group.forbidden_aggs))
        return checks

    def _aggregates_of_root(self, provider: Provider) -> frozenset[int]:
        root = self.state.providers.get(provider.root)
        return root.aggregates if root is not None else frozenset()

    # --- single providers ------------------------------------------------

    def _filtered(self, group: GroupIds) -> set[int]:
        """Providers with every class of the group that pass its trait, aggregate
        and in_tree filters: set operations on the model's indexes (C speed)."""
        state = self.state
        sets: list[set[int]] = [state.holders.get(rc, _EMPTY) for rc, _ in group.resources]
        sets += [_union(state.with_trait, any_of) for any_of in group.required]
        sets += [_union(state.members, any_of) for any_of in group.member_of]
        if group.tree_root is not None:
            sets.append(state.trees.get(group.tree_root, _EMPTY))
        sets.sort(key=len)
        found = set(sets[0])
        for other in sets[1:]:
            found &= other
        for trait in group.forbidden:
            found -= state.with_trait.get(trait, _EMPTY)
        for agg in group.forbidden_aggs:
            found -= state.members.get(agg, _EMPTY)
        return found

    def _singles(self, group: GroupIds, roots: Roots, limit: int | None,
                 rng: random.Random | None) -> list[Provider]:
        """``query.single_statement``: filters, then room for every class, then
        root_required, in id order (or at random) until ``limit``."""
        filtered = self._filtered(group)
        pool = sorted(filtered) if rng is None else list(filtered)
        root_ok = self._root_ok(roots)
        amounts = list(group.resources)
        providers = self.state.providers
        found: list[Provider] = []
        for rp in _order(pool, limit, rng):
            provider = providers[rp]
            inventories = provider.inventories
            for rc, amount in amounts:
                if not inventories[rc].fits(amount):
                    break
            else:
                if root_ok is None or root_ok(provider):
                    found.append(provider)
                    if limit is not None and len(found) >= limit:
                        break
        return found

    def single_providers(self, group: GroupIds, roots: Roots, limit: int | None,
                         rng: random.Random | None) -> list[tuple[int, int]]:
        return [(p.id, p.root) for p in self._singles(group, roots, limit, rng)]

    def single_trees(self, group: GroupIds, roots: Roots, limit: int | None
                     ) -> dict[int, ProviderSummary]:
        found = self._singles(group, roots, limit, None)
        return self.summaries(roots=[p.id for p in found])

    # --- match rows ------------------------------------------------------

    def match(self, groups: list[GroupIds], sharing_trait: int | None, roots: Roots,
              unsuffixed_traits: list[int]) -> list[MatchRow]:
        """``query.match``: rows part by part, in provider id order."""
        canonical = canonical_parts(groups)
        root_ok = self._root_ok(roots)
        rows: list[MatchRow] = []
        part = 0
        for group in groups:
            flagging = self._flagging(group, sharing_trait, root_ok)
            # A part equal to an earlier one is not asked again (as in the SQL).
            if not group.resources:
                if canonical[part] == part:
                    self._resourceless_rows(part, group, flagging, rows)
                part += 1
                continue
            if group.same_provider:
                checks = self._provider_filters(group)
            else:
                checks = self._unsuffixed_filters(group, flagging.member, flagging.escape,
                                                  flagging.flags_of)
            for rc, amount in group.resources:
                if canonical[part] == part:
                    self._class_rows(part, group, rc, amount, checks, flagging,
                                     unsuffixed_traits, rows)
                part += 1
        return rows

    def _flagging(self, group: GroupIds, sharing_trait: int | None,
                  root_ok: Callable[[Provider], bool] | None) -> _Flagging:
        """``query._flag_bits``, ``_escape`` and ``_root_gate`` for one group."""
        unsuffixed = not group.same_provider
        member = self._member(group)

        def flags_of(p: Provider) -> int:
            flags = 0
            if sharing_trait is not None and sharing_trait in p.traits:
                flags |= SHARING_FLAG
            if root_ok is not None and root_ok(p):
                flags |= ROOT_OK_FLAG
            if unsuffixed:
                if member is not None and member(p.aggregates):
                    flags |= MEMBER_FLAG
                if member is not None and member(self._aggregates_of_root(p)):
                    flags |= ROOT_MEMBER_FLAG
                if group.forbidden_aggs and not self._aggregates_of_root(p).isdisjoint(
                        group.forbidden_aggs):
                    flags |= ROOT_BAD_FLAG
            return flags

        def escape(p: Provider, flags: int) -> bool:
            # query._escape: a sharing provider's own root does not decide.
            if sharing_trait is None or (not group.same_provider
                                         and group.tree_root is not None):
                return False
            if not flags & SHARING_FLAG:
                return False
            if not group.same_provider and member is not None:
                return bool(flags & MEMBER_FLAG)
            return True

        def gate(p: Provider, flags: int) -> bool:
            if root_ok is None:
                return True
            return bool(flags & ROOT_OK_FLAG) or escape(p, flags)

        return _Flagging(member, flags_of, escape, gate)

    def _resourceless_rows(self, part: int, group: GroupIds, flagging: _Flagging,
                           rows: list[MatchRow]) -> None:
        """A resourceless group's part: every provider that passes its filters."""
        state = self.state
        checks = self._provider_filters(group)
        for rp in sorted(state.providers):
            p = state.providers[rp]
            if all(c(p) for c in checks):
                flags = flagging.flags_of(p)
                if flagging.gate(p, flags):
                    rows.append(MatchRow(part, rp, p.root, None, 0, 0, flags))

    def _class_rows(self, part: int, group: GroupIds, rc: int, amount: int,
                    checks: list[Check], flagging: _Flagging, unsuffixed_traits: list[int],
                    rows: list[MatchRow]) -> None:
        """One (group, class) part: the holders of ``rc`` with room for ``amount``
        that pass the group's filters, in id order (the hot loop of a search)."""
        state = self.state
        unsuffixed = not group.same_provider
        flags_of, gate = flagging.flags_of, flagging.gate
        for rp in state.sorted_holders(rc):
            p = state.providers[rp]
            inv = p.inventories[rc]
            if not inv.fits(amount):
                continue
            if group.tree_root is not None and p.root != group.tree_root:
                continue
            if not all(c(p) for c in checks):
                continue
            flags = flags_of(p)
            if not gate(p, flags):
                continue
            traits = 0
            if unsuffixed:
                for i, trait in enumerate(unsuffixed_traits):
                    if trait in p.traits:
                        traits |= 1 << i
            rows.append(MatchRow(part, rp, p.root, rc, inv.room, traits, flags))

    def _unsuffixed_filters(self, group: GroupIds, member, escape, flags_of) -> list[Check]:
        """``query._unsuffixed_filters``: only forbidden traits and aggregates exclude."""
        checks: list[Check] = []
        if group.forbidden:
            checks.append(_lacks_traits(group.forbidden))
        if group.forbidden_aggs:
            checks.append(_outside_aggregates(group.forbidden_aggs))
        local: list[Check] = []
        if member is not None:
            local.append(lambda p: member(p.aggregates) or member(self._aggregates_of_root(p)))
        if group.forbidden_aggs:
            forbidden = group.forbidden_aggs
            local.append(lambda p: self._aggregates_of_root(p).isdisjoint(forbidden))
        if local:
            checks.append(lambda p: all(c(p) for c in local) or escape(p, flags_of(p)))
        return checks

    # --- sharing, trees, summaries -----------------------------------------

    def sharing_anchors(self, providers: Iterable[int], roots: Roots,
                        forbidden_aggs: frozenset[int]) -> dict[int, list[Anchor]]:
        state = self.state
        root_ok = self._root_ok(roots)
        found: dict[int, list[Anchor]] = {}
        for rp in sorted(set(providers)):
            sharer = state.providers.get(rp)
            if sharer is None:
                continue
            anchor_roots: set[int] = set()
            for agg in sharer.aggregates:
                anchor_roots |= {state.providers[m].root for m in state.members.get(agg, ())}
            anchors = []
            for root in sorted(anchor_roots):
                root_provider = state.providers.get(root)
                ok = root_ok is None or (root_provider is not None and root_ok(root_provider))
                bad = bool(forbidden_aggs) and root_provider is not None and \
                    not root_provider.aggregates.isdisjoint(forbidden_aggs)
                anchors.append(Anchor(root=root, root_ok=ok, bad=bad))
            if anchors:
                found[rp] = anchors
        return found

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


def _union(index: dict[int, set[int]], any_of: frozenset[int]) -> set[int]:
    if len(any_of) == 1:
        return index.get(next(iter(any_of)), _EMPTY)
    return set().union(*(index.get(key, _EMPTY) for key in any_of))


def _has_any_trait(any_of: frozenset[int]) -> Check:
    return lambda p: not p.traits.isdisjoint(any_of)


def _lacks_traits(forbidden: frozenset[int]) -> Check:
    return lambda p: p.traits.isdisjoint(forbidden)


def _in_any_aggregate(any_of: frozenset[int]) -> Check:
    return lambda p: not p.aggregates.isdisjoint(any_of)


def _outside_aggregates(forbidden: frozenset[int]) -> Check:
    return lambda p: p.aggregates.isdisjoint(forbidden)


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
