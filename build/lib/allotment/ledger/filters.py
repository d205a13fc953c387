"""Plain filter values (traits, aggregates) shared by provider listing and candidates."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TraitFilter:
    # Each set is an any-of group; all groups must be satisfied.
    required: list[set[str]] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)

    def names(self) -> set[str]:
        out = set(self.forbidden)
        for group in self.required:
            out |= group
        return out

    def __bool__(self) -> bool:
        return bool(self.required or self.forbidden)


@dataclass
class AggregateFilter:
    # Each set is an any-of group; all groups must be satisfied.
    required: list[set[str]] = field(default_factory=list)
    forbidden: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.required or self.forbidden)
