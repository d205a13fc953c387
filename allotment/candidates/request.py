"""A parsed allocation-candidates request, as plain data.

The handler turns the query string into a ``CandidateRequest``; the engine
never sees HTTP. Names (classes, traits, aggregates, providers) are still
strings here: ``sources.ModelSource.resolve`` maps them to internal ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oslo_config import cfg


@dataclass(frozen=True)
class RequestGroup:
    """One request group: ``resources<suffix>``, ``required<suffix>``, ...

    The unsuffixed group (``suffix == ""``) may be spread over several
    providers of one tree plus sharing providers; a suffixed (granular)
    group must be satisfied by a single provider.
    """

    suffix: str
    # class name -> amount, in the order the client wrote them.
    resources: dict[str, int] = field(default_factory=dict)
    # Every set must be matched by at least one of its traits (any-of).
    required: tuple[frozenset[str], ...] = ()
    forbidden: frozenset[str] = frozenset()
    # Every set must be matched by at least one of its aggregates (any-of).
    member_of: tuple[frozenset[str], ...] = ()
    forbidden_aggs: frozenset[str] = frozenset()
    in_tree: str | None = None

    @property
    def same_provider(self) -> bool:
        return self.suffix != ""

    def describe(self) -> str:
        """A compact text for debug logs."""
        resources = ",".join(f"{rc}:{amount}" for rc, amount in self.resources.items())
        traits = [" or ".join(sorted(s)) for s in self.required]
        traits += ["!" + t for t in sorted(self.forbidden)]
        return (f"group '{self.suffix}' resources=[{resources}] traits=[{'; '.join(traits)}] "
                f"member_of={[sorted(s) for s in self.member_of]} "
                f"in_tree={self.in_tree}")


# A larger ``limit`` means the same as this one (no answer comes near it: the
# candidates budget stops far sooner), and this one every database can bind.
MAX_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class CandidateRequest:
    groups: tuple[RequestGroup, ...]
    limit: int | None = None
    group_policy: str | None = None
    # root_required: traits the root of every candidate's tree has / lacks.
    root_required: frozenset[str] = frozenset()
    root_forbidden: frozenset[str] = frozenset()
    # Each set of suffixes must be served from one subtree.
    same_subtrees: tuple[frozenset[str], ...] = ()
    # Before 1.29 a candidate never takes from two providers of one tree.
    nested_aware: bool = True

    @property
    def isolate(self) -> bool:
        return self.group_policy == "isolate"

    def requested_classes(self) -> set[str]:
        return {rc for group in self.groups for rc in group.resources}


@dataclass(frozen=True)
class Settings:
    """The ``[placement]`` options that shape generation."""

    randomize: bool = False
    # Most candidates generated; -1 for no cap.
    max_candidates: int = -1
    strategy: str = "depth-first"

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        placement = conf.placement
        return cls(randomize=placement.randomize_allocation_candidates,
                   max_candidates=placement.max_allocation_candidates,
                   strategy=placement.allocation_candidates_generation_strategy)
