"""JSON Schemas for the GET /allocation_candidates query string, by version."""

from allotment.http.microversion import Version
from allotment.schemas.common import GROUP_PATTERN, GROUP_PATTERN_1_33, extend

STRING = {"type": "string"}
# Upstream writes these query values' type as a list; error details quote it.
STRINGS = {"type": ["string"]}

QUERY_1_10 = {
    "type": "object",
    "properties": {"resources": STRING},
    "required": ["resources"],
    "additionalProperties": False,
}
QUERY_1_16 = extend(QUERY_1_10, limit={
    # Query values are strings; the pattern keeps them positive integers.
    "type": ["integer", "string"],
    "pattern": "^[1-9][0-9]*$",
    "minimum": 1,
    "minLength": 1,
})
QUERY_1_17 = extend(QUERY_1_16, required=STRINGS)
QUERY_1_21 = extend(QUERY_1_17, member_of=STRINGS)


def _grouped(names: tuple[str, ...], suffix: str) -> dict:
    return {f"^{name}({suffix})?$": STRING for name in names}


# From 1.25 resources, required and member_of may carry a group suffix.
QUERY_1_25 = {
    "type": "object",
    "properties": {
        "limit": QUERY_1_16["properties"]["limit"],
        "group_policy": {"type": "string", "enum": ["none", "isolate"]},
    },
    # In upstream's key order: error details quote the schema.
    "additionalProperties": False,
    "patternProperties": _grouped(("resources", "required", "member_of"), GROUP_PATTERN),
}
QUERY_1_31 = {**QUERY_1_25, "patternProperties": _grouped(
    ("resources", "required", "member_of", "in_tree"), GROUP_PATTERN)}
QUERY_1_33 = {**QUERY_1_31, "patternProperties": _grouped(
    ("resources", "required", "member_of", "in_tree"), GROUP_PATTERN_1_33)}
QUERY_1_35 = extend(QUERY_1_33, root_required=STRINGS)
QUERY_1_36 = extend(QUERY_1_35, same_subtree=STRINGS)

_BY_FACT = (
    ("same_subtree", QUERY_1_36),
    ("root_required", QUERY_1_35),
    ("string_group_suffix", QUERY_1_33),
    ("in_tree_candidates", QUERY_1_31),
    ("granular", QUERY_1_25),
    ("candidates_member_of", QUERY_1_21),
    ("candidates_required", QUERY_1_17),
    ("candidates_limit", QUERY_1_16),
)


def query_schema(version: Version) -> dict:
    for fact, schema in _BY_FACT:
        if version.has(fact):
            return schema
    return QUERY_1_10
