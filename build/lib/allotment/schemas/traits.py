"""JSON Schemas for traits: names, a provider's trait set, the list query."""

from allotment.schemas.common import CUSTOM_TRAIT_PATTERN

TRAIT = {"type": "string", "minLength": 1, "maxLength": 255}
CUSTOM_TRAIT = {**TRAIT, "pattern": CUSTOM_TRAIT_PATTERN}

# PUT /resource_providers/{uuid}/traits
SET_PROVIDER_TRAITS = {
    "type": "object",
    "properties": {
        "traits": {"type": "array", "items": TRAIT},
        "resource_provider_generation": {"type": "integer"},
    },
    "required": ["traits", "resource_provider_generation"],
    "additionalProperties": False,
}

# GET /traits
LIST = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "associated": {"type": "string"},
    },
    "additionalProperties": False,
}
