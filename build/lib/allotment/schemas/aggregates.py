"""JSON Schemas for a provider's aggregates: a bare list (1.1) or with generation (1.19)."""

_UUID_LIST = {
    "type": "array",
    "items": {"type": "string", "format": "uuid"},
    "uniqueItems": True,
}

SET_1_1 = _UUID_LIST
SET_1_19 = {
    "type": "object",
    "properties": {
        "aggregates": _UUID_LIST,
        "resource_provider_generation": {"type": "integer"},
    },
    "required": ["aggregates", "resource_provider_generation"],
    "additionalProperties": False,
}
