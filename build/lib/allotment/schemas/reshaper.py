"""JSON Schema for POST /reshaper (1.30+; mappings from 1.34, consumer_type from 1.38)."""

from __future__ import annotations

from allotment.http.microversion import Version
from allotment.schemas import allocations, inventories
from allotment.schemas.common import UUID_PATTERN


def _reshape(consumer_entry: dict) -> dict:
    return {
        "type": "object",
        "properties": {
            # At least one provider: otherwise there is nothing to reshape.
            "inventories": {
                "type": "object",
                "patternProperties": {UUID_PATTERN: inventories.REPLACE},
                "minProperties": 1,
                "additionalProperties": False,
            },
            # May be empty: the moved inventory may have no allocations yet.
            "allocations": allocations.by_consumer(consumer_entry, min_consumers=0),
        },
        "required": ["inventories", "allocations"],
        "additionalProperties": False,
    }


RESHAPE_1_30 = _reshape(allocations.PUT_1_28)
RESHAPE_1_34 = _reshape(allocations.PUT_1_34)
RESHAPE_1_38 = _reshape(allocations.PUT_1_38)


def reshape_schema(version: Version) -> dict:
    if version.has("consumer_types"):
        return RESHAPE_1_38
    if version.has("mappings"):
        return RESHAPE_1_34
    return RESHAPE_1_30
