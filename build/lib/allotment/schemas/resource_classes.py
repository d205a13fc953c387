"""JSON Schemas for resource class bodies (and names given in the URL from 1.7)."""

from allotment.schemas.common import CUSTOM_RC_PATTERN

# POST /resource_classes and, in 1.2-1.6, the rename body of PUT.
CLASS = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": CUSTOM_RC_PATTERN, "maxLength": 255},
    },
    "required": ["name"],
    "additionalProperties": False,
}
