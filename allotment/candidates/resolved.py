"""A request resolved to ids, and what the source answers about it: plain values.

The engine asks its ``sources.Source`` about these and gets these back;
explain reads them too.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NamedTuple

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


def refuse_unknown(request: CandidateRequest, names: NameIds) -> None:
    """``UnknownTraits`` / ``UnknownResourceClass`` for the first unknown name.

    The order upstream finds them in: root_required, then group by group
    its classes and its traits.
    """
    for trait in sorted(request.root_required) + sorted(request.root_forbidden):
        if trait not in names.traits:
            raise UnknownTraits([trait])
    for group in request.groups:
        for rc in group.resources:
            if rc not in names.classes:
                raise UnknownResourceClass(rc)
        for trait in [n for s in group.required for n in sorted(s)] + sorted(group.forbidden):
            if trait not in names.traits:
                raise UnknownTraits([trait])


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
    # False when a filter can never match (unknown aggregate, in_tree provider).
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
    member_of = tuple(frozenset(names.aggregates[u] for u in s if u in names.aggregates)
                      for s in group.member_of)
    tree_root = names.tree_roots.get(group.in_tree) if group.in_tree else None
    possible = all(member_of) and (group.in_tree is None or tree_root is not None)
    return GroupIds(
        suffix=group.suffix,
        resources=tuple((names.classes[rc], amount) for rc, amount in group.resources.items()),
        required=tuple(frozenset(names.traits[n] for n in s) for s in group.required),
        forbidden=frozenset(names.traits[n] for n in group.forbidden),
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

class MatchFlag(enum.IntFlag):
    """Bits of the ``flags`` column of match rows (facts about the provider)."""

    SHARING = 1       # the provider has MISC_SHARES_VIA_AGGREGATE
    ROOT_OK = 2       # its root passes root_required
    MEMBER = 4        # it is itself in the unsuffixed group's member_of aggregates
    ROOT_MEMBER = 8   # its root is
    ROOT_BAD = 16     # its root is in a forbidden aggregate of the unsuffixed group


class MatchRow(NamedTuple):
    part: int
    provider: int
    root: int
    class_id: int | None
    # min(free capacity, max_unit): the most one candidate may take.
    room: int
    traits: int
    flags: int


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
