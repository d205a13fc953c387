"""The query string of GET /allocation_candidates as a ``CandidateRequest``.

Upstream's exact checks and 400 messages, per microversion. GET
/allocation_candidates, its explain and GET /headroom read their query with
``parse_request``; so do the headroom metrics (``allotment.metrics``) for the
request shapes configured in ``[allotment] headroom_requests``.
"""

from __future__ import annotations

import re

from allotment import errors
from allotment.candidates.request import MAX_LIMIT, CandidateRequest, RequestGroup
from allotment.http import filter_params
from allotment.http.microversion import Version
from allotment.http.request import Query, validate_query
from allotment.ledger.filters import AggregateFilter, TraitFilter
from allotment.schemas import allocation_candidates as schemas
from allotment.schemas.common import GROUP_PATTERN, GROUP_PATTERN_1_33

_GROUP_KEYS = "resources|required|member_of|in_tree"
# Matched whole (``fullmatch``: see ``allotment.http.patterns``).
_KEY = re.compile(rf"({_GROUP_KEYS})({GROUP_PATTERN})?")
_KEY_1_33 = re.compile(rf"({_GROUP_KEYS})({GROUP_PATTERN_1_33})?")


class _Group:
    """A request group while its parameters are being read."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.resources: dict[str, int] = {}
        self.traits = TraitFilter()
        self.aggregates = AggregateFilter()
        self.in_tree: str | None = None

    def freeze(self) -> RequestGroup:
        return RequestGroup(
            suffix=self.suffix,
            resources=self.resources,
            required=tuple(frozenset(s) for s in self.traits.required),
            forbidden=frozenset(self.traits.forbidden),
            member_of=tuple(frozenset(s) for s in self.aggregates.required),
            forbidden_aggs=frozenset(self.aggregates.forbidden),
            in_tree=self.in_tree,
        )


def parse_groups(q: Query, version: Version) -> list[_Group]:
    """The request groups, in the order their first parameter appears."""
    pattern = _KEY_1_33 if version.has("string_group_suffix") else _KEY
    groups: dict[str, _Group] = {}
    for key, value in q.pairs:
        found = pattern.fullmatch(key)
        if not found:
            continue
        prefix, suffix = found.group(1), found.group(2) or ""
        group = groups.get(suffix)
        if group is None:
            group = groups[suffix] = _Group(suffix)
        if prefix == "resources":
            group.resources = filter_params.parse_resources(value)
        elif prefix == "required":
            group.traits = filter_params.parse_required(q, version, "required" + suffix)
        elif prefix == "member_of":
            group.aggregates = filter_params.parse_member_of(q, version, suffix)
        else:
            group.in_tree = filter_params.parse_in_tree(value)
    return list(groups.values())


def _check_groups(groups: list[_Group], same_subtrees: list[set[str]],
                  version: Version) -> None:
    if version.has("same_subtree"):
        resourceless = [g.suffix for g in groups if not g.resources]
        if len(resourceless) == len(groups):
            raise errors.BadRequest(
                "There must be at least one resources or resources[$S] parameter.",
                code=errors.QUERYPARAM_MISSING_VALUE)
        in_subtrees = [s for subtree in same_subtrees for s in sorted(subtree)]
        bad = [s for s in resourceless if s not in in_subtrees]
        if bad:
            raise errors.BadRequest(
                "Resourceless suffixed group request should be specified in `same_subtree` "
                f"query param: bad group(s) - {bad}.", code=errors.QUERYPARAM_BAD_VALUE)
        known = [g.suffix for g in groups]
        bad = list(dict.fromkeys(s for s in in_subtrees if s not in known))
        if bad:
            raise errors.BadRequest(
                f"Real suffixes should be specified in `same_subtree`: {bad} not found in "
                f"{known}.", code=errors.QUERYPARAM_BAD_VALUE)
    else:
        orphans = [f"required{g.suffix}" for g in groups
                   if g.traits.required and not g.resources]
        if orphans:
            raise errors.BadRequest(
                "All traits parameters must be associated with resources.  Found the "
                f"following orphaned traits keys: {', '.join(orphans)}")
        orphans = [f"member_of{g.suffix}" for g in groups
                   if g.aggregates and not g.resources]
        if orphans:
            raise errors.BadRequest(
                "All member_of parameters must be associated with resources. Found the "
                f"following orphaned member_of keys: {', '.join(orphans)}")
        if not all(g.resources for g in groups):
            raise errors.BadRequest("All request groups must specify resources.")
        if not groups:
            raise errors.BadRequest(
                "At least one request group (`resources` or `resources{$S}`) is required.")
    if version.has("forbidden_traits"):
        conflicts = sorted(
            f"required{g.suffix}: ({', '.join(sorted(any_of))})"
            for g in groups for any_of in g.traits.required
            if any_of <= g.traits.forbidden)
        if conflicts:
            raise errors.BadRequest(
                "Conflicting required and forbidden traits found in the following traits "
                f"keys: {', '.join(conflicts)}")


def parse_request(q: Query, version: Version) -> CandidateRequest:
    """A validated CandidateRequest, or a 400 with upstream's message."""
    validate_query(q, schemas.query_schema(version))
    # The first of repeated limit and group_policy values counts, as upstream.
    limit = None
    if "limit" in q:
        first = q.getall("limit")[0]
        if not re.fullmatch(r"[1-9][0-9]*", first):
            raise errors.BadRequest(
                f"Invalid query string parameters: '{first}' does not match "
                "'^[1-9][0-9]*$'")
        # Compared by length first: int() refuses thousands of digits.
        limit = MAX_LIMIT if len(first) > 10 else min(int(first), MAX_LIMIT)
    group_policy = q.getall("group_policy")[0] if "group_policy" in q else None
    root_required: set[str] = set()
    root_forbidden: set[str] = set()
    if "root_required" in q:
        values = q.getall("root_required")
        if len(values) > 1:
            raise errors.BadRequest(
                "Query parameter 'root_required' may be specified only once.",
                code=errors.ILLEGAL_DUPLICATE_QUERYPARAM)
        required, root_forbidden = filter_params.parse_trait_value(
            values[0], allow_forbidden=True, allow_any=False)
        root_required = set().union(*required)
        conflicts = root_required & root_forbidden
        if conflicts:
            raise errors.BadRequest(
                "Conflicting required and forbidden traits found in root_required: "
                f"{', '.join(sorted(conflicts))}", code=errors.QUERYPARAM_BAD_VALUE)
    same_subtrees: list[set[str]] = []
    for value in q.getall("same_subtree"):
        suffixes = {part.strip() for part in value.split(",")}
        if "" in suffixes:
            raise errors.BadRequest(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
                code=errors.QUERYPARAM_BAD_VALUE)
        same_subtrees.append(suffixes)

    groups = parse_groups(q, version)
    _check_groups(groups, same_subtrees, version)
    if group_policy is None and sum(1 for g in groups if g.suffix) > 1:
        raise errors.BadRequest(
            'The "group_policy" parameter is required when specifying more than one '
            '"resources{N}" parameter.')
    return CandidateRequest(
        groups=tuple(group.freeze() for group in groups),
        limit=limit,
        group_policy=group_policy,
        root_required=frozenset(root_required),
        root_forbidden=frozenset(root_forbidden),
        same_subtrees=tuple(frozenset(s) for s in same_subtrees),
        nested_aware=version.has("nested_candidates"),
    )
