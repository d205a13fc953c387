"""JSON Schemas for allocation bodies (PUT /allocations/{uuid}, POST /allocations), by version.

The request shapes: a list of ``{resource_provider: {uuid}, resources}`` before
1.12, a dict keyed by provider uuid from 1.12; ``project_id``/``user_id``
required from 1.8; ``consumer_generation`` from 1.28 (and with it, an empty
``allocations`` on PUT); ``mappings`` from 1.34; ``consumer_type`` from 1.38.
POST bodies are a dict of consumer uuid -> the PUT body of the same version.
"""

from __future__ import annotations

import copy
from typing import Any

from allotment.http.microversion import Version
from allotment.schemas.common import (
    CONSUMER_TYPE_PATTERN,
    GROUP_PATTERN_1_33,
    RC_PATTERN,
    UUID_PATTERN,
)

# {CLASS: amount}, at least one class, amounts of at least 1.
RESOURCES = {
    "type": "object",
    "minProperties": 1,
    "patternProperties": {RC_PATTERN: {"type": "integer", "minimum": 1}},
    "additionalProperties": False,
}

EXTERNAL_ID = {"type": "string", "minLength": 1, "maxLength": 255}

PUT_1_0: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allocations": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "resource_provider": {
                        "type": "object",
                        "properties": {"uuid": {"type": "string", "format": "uuid"}},
                        "additionalProperties": False,
                        "required": ["uuid"],
                    },
                    "resources": RESOURCES,
                },
                "required": ["resource_provider", "resources"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["allocations"],
    "additionalProperties": False,
}

PUT_1_8 = copy.deepcopy(PUT_1_0)
PUT_1_8["properties"]["project_id"] = EXTERNAL_ID
PUT_1_8["properties"]["user_id"] = EXTERNAL_ID
PUT_1_8["required"] = ["allocations", "project_id", "user_id"]

# From 1.12 allocations are keyed by provider uuid, as GET shows them.
PUT_1_12: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allocations": {
            "type": "object",
            "minProperties": 1,
            "patternProperties": {
                UUID_PATTERN: {
                    "type": "object",
                    "properties": {
                        # Accepted (GET shows it) but not checked.
                        "generation": {"type": "integer"},
                        "resources": RESOURCES,
                    },
                    "required": ["resources"],
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "project_id": EXTERNAL_ID,
        "user_id": EXTERNAL_ID,
    },
    "additionalProperties": False,
    "required": ["allocations", "project_id", "user_id"],
}

# One consumer's entry where its allocations may be emptied (POST, and PUT from 1.28).
EMPTIABLE_1_12 = copy.deepcopy(PUT_1_12)
EMPTIABLE_1_12["properties"]["allocations"]["minProperties"] = 0

# (Upstream's has a meaningless additionalProperties; it shows in error details.)
CONSUMER_GENERATION = {"type": ["integer", "null"], "additionalProperties": False}

PUT_1_28 = copy.deepcopy(EMPTIABLE_1_12)
PUT_1_28["properties"]["consumer_generation"] = CONSUMER_GENERATION
PUT_1_28["required"] = PUT_1_28["required"] + ["consumer_generation"]

MAPPINGS = {
    "type": "object",
    "minProperties": 1,
    "patternProperties": {
        GROUP_PATTERN_1_33: {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "format": "uuid"},
        },
    },
}

PUT_1_34 = copy.deepcopy(PUT_1_28)
PUT_1_34["properties"]["mappings"] = MAPPINGS

PUT_1_38 = copy.deepcopy(PUT_1_34)
PUT_1_38["properties"]["consumer_type"] = {
    "type": "string",
    "pattern": CONSUMER_TYPE_PATTERN,
    "minLength": 1,
    "maxLength": 255,
}
PUT_1_38["required"] = PUT_1_38["required"] + ["consumer_type"]


def by_consumer(entry: dict, min_consumers: int = 1) -> dict:
    """A POST-style body: consumer uuid -> ``entry``."""
    return {
        "type": "object",
        "minProperties": min_consumers,
        "additionalProperties": False,
        "patternProperties": {UUID_PATTERN: entry},
    }


POST_1_13 = by_consumer(EMPTIABLE_1_12)
POST_1_28 = by_consumer(PUT_1_28)
POST_1_34 = by_consumer(PUT_1_34)
POST_1_38 = by_consumer(PUT_1_38)


def put_schema(version: Version) -> dict:
    for fact, schema in (("consumer_types", PUT_1_38), ("mappings", PUT_1_34),
                         ("consumer_generation", PUT_1_28),
                         ("allocations_dict_format", PUT_1_12),
                         ("require_project_user", PUT_1_8)):
        if version.has(fact):
            return schema
    return PUT_1_0


def post_schema(version: Version) -> dict:
    for fact, schema in (("consumer_types", POST_1_38), ("mappings", POST_1_34),
                         ("consumer_generation", POST_1_28)):
        if version.has(fact):
            return schema
    return POST_1_13
