"""A request resolved to ids, and what the source answers about it: plain values.

The engine asks its ``sources.ModelSource`` about these and gets these back;
explain reads them too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import os_traits

from allotment.candidates.request import CandidateRequest, RequestGroup
from allotment.ledger.errors import UnknownResourceClass, UnknownTraits

SHARING_TRAIT = os_traits.MISC_SHARES_VIA_AGGREGATE


@dataclass(frozen=True)
class Layout:
    has_trees: bool
    # A nested (non-root) or a sharing provider has inventory of a requested class.
    spread_possible: bool


@dataclass
class NameIds:
    """Internal ids for the names a request uses (and the layout of the cloud)."""

    classes: dict[str, int] = field(default_factory=dict)
    traits: dict[str, int] = field(default_factory=dict)
    aggregates: dict[str, int] = field(default_factory=dict)
    # in_tree provider uuid -> id of its root
    tree_roots: dict[str, int] = field(default_factory=dict)
    sharing_trait: int | None = None
    layout: Layout = Layout(has_trees=False, spread_possible=False)


class Stops(Protocol):
    """What the source and the engine tell ``refuse_unknown`` about the cloud."""

    def roots_match(self, roots: Roots) -> bool:
        """Some root provider passes root_required."""

    def aggregates_match(self, member_of: tuple[frozenset[int], ...]) -> bool:
        """Some provider is itself in an aggregate of every any-of set."""

    def group_finds(self, index: int) -> bool:
        """Request group ``index`` alone (with root_required) has a candidate."""


def unknown_classes(group: RequestGroup, names: NameIds) -> list[str]:
    """The group's classes that do not exist, in the order it names them."""
    return [rc for rc in group.resources if rc not in names.classes]


def unknown_traits(group: RequestGroup, names: NameIds) -> list[str]:
    """The group's required, then forbidden, traits that do not exist."""
    traits = [n for s in group.required for n in sorted(s)] + sorted(group.forbidden)
    return [n for n in traits if n not in names.traits]


def member_of_ids(group: RequestGroup, names: NameIds) -> tuple[frozenset[int], ...]:
    """``member_of`` as ids; an aggregate that does not exist is left out (a set
    of none but those is empty: nothing is in it)."""
    return tuple(frozenset(names.aggregates[u] for u in s if u in names.aggregates)
                 for s in group.member_of)


def refuse_unknown(request: CandidateRequest, names: NameIds, stops: Stops) -> bool:
    """``UnknownTraits`` / ``UnknownResourceClass`` for the first unknown name
    upstream meets; True when upstream finds nothing before it meets one (the
    answer is then no candidates); False when every name exists (nothing is
    asked of ``stops`` then).

    Upstream (``AllocationCandidates._get_by_requests`` and its
    ``RequestWideSearchContext`` / ``RequestGroupSearchContext``) resolves
    root_required first: an unknown trait is the 400, no root with those
    traits the empty answer. Then it takes the groups one at a time, in the
    order their first parameter appears in the query string, and finishes
    each before it reads the next: the group's classes (unknown: 400), its
    member_of (no provider in the aggregates: empty answer), its required
    and forbidden traits (unknown: 400), its in_tree (no such provider:
    empty answer), then the group's own candidates (none: the empty answer
    for the whole request, whatever the later groups name). At every
    microversion alike.
    """
    later = [bool(unknown_classes(g, names) or unknown_traits(g, names))
             for g in request.groups]
    root_traits = sorted(request.root_required) + sorted(request.root_forbidden)
    unknown_root = [n for n in root_traits if n not in names.traits]
    if not unknown_root and not any(later):
        return False
    if unknown_root:
        raise UnknownTraits(unknown_root[:1])
    if root_traits:
        roots = Roots(required=tuple(sorted(names.traits[n] for n in request.root_required)),
                      forbidden=tuple(sorted(names.traits[n] for n in request.root_forbidden)))
        if not stops.roots_match(roots):
            return True
    for index, group in enumerate(request.groups):
        classes = unknown_classes(group, names)
        if classes:
            raise UnknownResourceClass(classes[0])
        if group.member_of and not stops.aggregates_match(member_of_ids(group, names)):
            return True
        traits = unknown_traits(group, names)
        if traits:
            raise UnknownTraits(traits[:1])
        if group.in_tree and group.in_tree not in names.tree_roots:
            return True
        if any(later[index + 1:]) and not stops.group_finds(index):
            return True
    return False  # not reached: the last group with an unknown name raised


@dataclass(frozen=True)
class GroupIds:
    """A request group with names replaced by ids (see ``group_ids``)."""

    suffix: str
    resources: tuple[tuple[int, int], ...]   # (class id, amount)
    required: tuple[frozenset[int], ...]
    forbidden: frozenset[int]
    member_of: tuple[frozenset[int], ...]
    forbidden_aggs: frozenset[int]
    tree_root: int | None
    # False when a filter can never match (unknown aggregate, in_tree provider,
    # class or trait).
    possible: bool = True

    @property
    def same_provider(self) -> bool:
        return self.suffix != ""

    @property
    def selects(self) -> bool:
        """As upstream, a resourceless group selects providers only by positive
        trait or aggregate filters: without any, it matches nothing."""
        return bool(self.resources or self.required or self.member_of)


def group_ids(group: RequestGroup, names: NameIds) -> GroupIds:
    """The group as ids. A class or trait that does not exist makes it a group
    that matches nothing (``refuse_unknown`` has decided what upstream does
    before this is asked)."""
    member_of = member_of_ids(group, names)
    tree_root = names.tree_roots.get(group.in_tree) if group.in_tree else None
    possible = all(member_of) and (group.in_tree is None or tree_root is not None) \
        and not unknown_classes(group, names) and not unknown_traits(group, names)
    return GroupIds(
        suffix=group.suffix,
        resources=tuple((names.classes[rc], amount) for rc, amount in group.resources.items()
                        if rc in names.classes),
        required=tuple(frozenset(names.traits[n] for n in s if n in names.traits)
                       for s in group.required),
        forbidden=frozenset(names.traits[n] for n in group.forbidden if n in names.traits),
        member_of=member_of,
        forbidden_aggs=frozenset(names.aggregates[u] for u in group.forbidden_aggs
                                 if u in names.aggregates),
        tree_root=tree_root,
        possible=possible,
    )


@dataclass(frozen=True)
class Roots:
    """root_required as ids (request-wide)."""

    required: tuple[int, ...] = ()
    forbidden: tuple[int, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.forbidden)


# --- what a source answers ----------------------------------------------------

class Match(NamedTuple):
    """One provider that can serve one part of a request on its own."""

    part: int
    provider: int
    root: int
    class_id: int | None
    # min(free capacity, max_unit): the most one candidate may take.
    room: int
    # The unsuffixed group's required traits it has, as bits.
    traits: int
    # It may serve its own tree; it may serve trees it reaches as a sharing
    # provider (``rules.GroupRules``).
    home: bool
    shares: bool


def part_keys(groups: list[GroupIds]) -> list[tuple]:
    """One key per part; equal keys mean equal rows (asked once)."""
    keys: list[tuple] = []
    for g in groups:
        filters = (g.same_provider, g.required, g.forbidden, g.member_of, g.forbidden_aggs)
        if not g.resources:
            keys.append(("resourceless", *filters))
        keys += [(rc, amount, g.tree_root, *filters) for rc, amount in g.resources]
    return keys


def canonical_parts(groups: list[GroupIds]) -> list[int]:
    """For each part, the first part with the same rows."""
    keys = part_keys(groups)
    return [keys.index(key) for key in keys]


@dataclass(slots=True)
class ProviderSummary:
    id: int
    uuid: str
    parent_id: int | None
    root_id: int
    # class name -> {"capacity": ..., "used": ...}, for every inventory
    resources: dict[str, dict[str, int]] = field(default_factory=dict)
    traits: list[str] = field(default_factory=list)
    parent_uuid: str | None = None
    root_uuid: str | None = None
    # The read model's cache of this summary's JSON, by shape (None: no cache).
    rendered: dict[tuple, bytes] | None = None


@dataclass(frozen=True)
class Anchor:
    root: int
    root_ok: bool
    # The root is in a forbidden aggregate of the unsuffixed group.
    bad: bool
