"""Microversion negotiation and the table of version-dependent facts.

Handlers never compare version numbers themselves: they ask
``req.context.version.has("fact")``, and every fact is one line below.
"""

from __future__ import annotations

from dataclasses import dataclass

import microversion_parse

from allotment import errors

SERVICE_TYPE = "placement"
MIN_VERSION = (1, 0)
MAX_VERSION = (1, 39)

# fact -> first microversion where it holds.
GATES: dict[str, tuple[int, int]] = {
    "aggregates": (1, 1),
    "resource_classes": (1, 2),
    "member_of": (1, 3),
    "resources_filter": (1, 4),
    "delete_all_inventories": (1, 5),
    "traits": (1, 6),
    "resource_class_put_create": (1, 7),
    "require_project_user": (1, 8),
    "usages": (1, 9),
    "allocation_candidates": (1, 10),
    "provider_allocations_link": (1, 11),
    "allocations_dict_format": (1, 12),
    "post_allocations": (1, 13),
    "provider_tree": (1, 14),
    "cache_headers": (1, 15),
    "candidates_limit": (1, 16),
    "candidates_required": (1, 17),
    "providers_required": (1, 18),
    "aggregates_generation": (1, 19),
    "create_provider_returns_body": (1, 20),
    "candidates_member_of": (1, 21),
    "forbidden_traits": (1, 22),
    "error_codes": (1, 23),
    "multiple_member_of": (1, 24),
    "granular": (1, 25),
    "reserved_equals_total": (1, 26),
    "summaries_all_inventory": (1, 27),
    "consumer_generation": (1, 28),
    "nested_candidates": (1, 29),
    "reshaper": (1, 30),
    "in_tree_candidates": (1, 31),
    "forbidden_aggregates": (1, 32),
    "string_group_suffix": (1, 33),
    "mappings": (1, 34),
    "root_required": (1, 35),
    "same_subtree": (1, 36),
    "reparent": (1, 37),
    "consumer_types": (1, 38),
    "any_traits": (1, 39),
}


@dataclass(frozen=True)
class Version:
    major: int
    minor: int

    def has(self, fact: str) -> bool:
        return (self.major, self.minor) >= GATES[fact]

    def at_least(self, minor: int) -> bool:
        return (self.major, self.minor) >= (1, minor)

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


MIN = Version(*MIN_VERSION)
MAX = Version(*MAX_VERSION)


# Every version string the service speaks, oldest first (microversion-parse's form).
VERSION_STRINGS = [f"{MIN_VERSION[0]}.{minor}"
                   for minor in range(MIN_VERSION[1], MAX_VERSION[1] + 1)]


def negotiate(headers: dict[str, str]) -> Version:
    """The version a request asks for; MIN when it asks for none.

    microversion-parse decides, as it does for upstream, so that the refusals
    read the same: a malformed version is a 400, one out of range a 406.
    """
    try:
        found = microversion_parse.extract_version(headers, SERVICE_TYPE, VERSION_STRINGS)
    except TypeError as exc:
        raise errors.BadRequest(f"Invalid microversion: {exc}") from None
    except ValueError as exc:
        raise errors.NotAcceptable(f"Invalid microversion: {exc}", headers={}) from None
    return Version(found.major, found.minor)
