"""Explain's words: a reason a tree is left out, and the summary of how many.

``Reason`` is one thing that keeps a tree out of the answer, worded from what
decided it: a rule's ``rules.Refusal`` (with its ids and numbers), a tree that
holds no inventory of a class, or the engine's ``search.Shortfall``. Words are
made only for the reasons shown; two reasons are the same when they say the
same of the same provider (a root's refusal, met through each of its
providers, counts once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from allotment.candidates import rules
from allotment.candidates.model import State

# The group of request-wide reasons (root_required, limit, combination).
WHOLE_REQUEST = "*"

# Every ``filter`` a reason may name.
FILTERS = ("unknown_name", "unknown_aggregate", "unknown_in_tree", "in_tree", "member_of",
           "forbidden_aggregate", "required_trait", "forbidden_trait", "no_inventory",
           "capacity", "min_unit", "max_unit", "step_size", "root_required",
           "root_forbidden", "group_policy_isolate", "same_subtree", "combination", "limit")


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
        """What the summary counts trees by."""
        return (self.group, self.filter, self.resource_class)

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "filter": self.filter,
                "provider_uuid": self.provider_uuid, "resource_class": self.resource_class,
                **dict(self.numbers), "detail": self.detail}


# What each rule's refusal says; the numbers are the refusal's own. ``name`` is
# the provider's, or its root's for a refusal the root decided.
_WORDS = {
    "in_tree": "{name} is not in the in_tree provider's tree",
    "member_of": "{name} is not in aggregate {aggregates_any_of}",
    "forbidden_aggregate": "{root}{name} is in forbidden aggregate {aggregates}",
    "required_trait": "{name} lacks required trait {traits_any_of}",
    "forbidden_trait": "{name} has forbidden trait {traits}",
    "root_required": "root {name} lacks required trait {traits}",
    "root_forbidden": "root {name} has forbidden trait {traits}",
    "min_unit": "{name} allocates at least {min_unit} {rc} at a time, {requested} requested",
    "max_unit": "{name} allocates at most {max_unit} {rc} at a time, {requested} requested",
    "step_size": "{name} allocates {rc} in steps of {step_size}, {requested} requested",
    "capacity": "{name} has {free_or_none} {rc} free of {capacity}, {requested} requested",
}

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


@dataclass
class Words:
    """The names reasons show: providers, classes, traits and aggregates."""

    state: State
    class_names: dict[int, str]
    trait_names: dict[int, str]
    aggregate_uuids: dict[int, str]

    def name(self, rp: int) -> str:
        provider = self.state.providers[rp]
        return provider.name or provider.uuid

    def uuid(self, rp: int) -> str:
        return self.state.providers[rp].uuid

    def traits_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return _any_of(sets, lambda s: [self.trait_names[i] for i in s])

    def aggs_any_of(self, sets: Iterable[frozenset[int]]) -> str:
        return _any_of(sets, lambda s: [self.aggregate_uuids[i] for i in s])

    def refusal(self, group: str, refusal: rules.Refusal, rp: int,
                rc: int | None = None) -> Reason:
        """A rule's refusal of provider ``rp`` (of its root when the root decided),
        to be put in words if shown."""
        if refusal.on_root:
            rp = self.state.providers[rp].root
        rc_name = self.class_names[rc] if rc is not None else None
        return Reason(group, refusal.filter, lambda: self._words(refusal, rp, rc_name),
                      self.uuid(rp), rc_name, refusal.numbers, decided_by=refusal.sets)

    def _words(self, refusal: rules.Refusal, rp: int, rc_name: str | None) -> str:
        fields: dict[str, object] = {"name": self.name(rp), "rc": rc_name,
                                     "root": "root " if refusal.on_root else "",
                                     **dict(refusal.numbers)}
        if refusal.filter in ("member_of", "forbidden_aggregate"):
            fields["aggregates"] = ", ".join(sorted(self.aggregate_uuids[i]
                                                    for i in refusal.ids))
            fields["aggregates_any_of"] = self.aggs_any_of(refusal.sets)
        elif refusal.sets:
            fields["traits"] = ", ".join(sorted(self.trait_names[i] for i in refusal.ids))
            fields["traits_any_of"] = self.traits_any_of(refusal.sets)
        if "free" in fields:
            fields["free_or_none"] = max(dict(refusal.numbers)["free"], 0)
        return _WORDS[refusal.filter].format(**fields)

    def summary(self, key: tuple[str, str | None], trees: int, amount: object) -> str:
        """The line counting the trees left out for (filter, class)."""
        name, rc = key
        if name == "combination" and rc is not None:
            text = f"the groups together want more {rc} than the tree has"
        else:
            text = _SUMMARIES[name].format(rc=rc, amount=amount)
        return f"{trees} tree: {text}" if trees == 1 else f"{trees} trees: {text}"


def _any_of(sets: Iterable[frozenset[int]], names: Callable[[frozenset[int]], list[str]]) -> str:
    return " and ".join(" or ".join(sorted(names(s))) if len(s) > 1 else names(s)[0]
                        for s in sets)
