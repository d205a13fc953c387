"""JSON Schemas for inventory bodies (one record, a POSTed record, a full set)."""

from allotment.ledger.capacity import MAX_INT, MAX_RATIO
from allotment.schemas.common import RC_PATTERN

# Upstream's column bounds: a signed 32-bit integer (MAX_INT) and a single-precision
# float (MAX_RATIO); ledger.inventories.check_capacity bounds what they make.


def _bounded_int(minimum: int) -> dict:
    return {"type": "integer", "maximum": MAX_INT, "minimum": minimum}


_FIELDS = {
    "resource_provider_generation": {"type": "integer"},
    "total": _bounded_int(1),
    "reserved": _bounded_int(0),
    "min_unit": _bounded_int(1),
    "max_unit": _bounded_int(1),
    "step_size": _bounded_int(1),
    "allocation_ratio": {"type": "number", "maximum": MAX_RATIO},
}

# PUT /resource_providers/{uuid}/inventories/{resource_class}
INVENTORY = {
    "type": "object",
    "properties": _FIELDS,
    "required": ["total", "resource_provider_generation"],
    "additionalProperties": False,
}

# POST /resource_providers/{uuid}/inventories: the class in the body; a
# generation is accepted (and ignored), as upstream does.
CREATE = {
    "type": "object",
    "properties": {**_FIELDS, "resource_class": {"type": "string", "pattern": RC_PATTERN}},
    "required": ["total", "resource_class"],
    "additionalProperties": False,
}

# PUT /resource_providers/{uuid}/inventories: records keyed by class name.
# Keys that are not class-like are not validated here; they fail later as
# unknown resource classes (whatever their value: upstream answers a 500 for a
# value that is no object; we refuse the class). The schema stays upstream's:
# its text is quoted in validation errors.
_RECORD = {
    "type": "object",
    "properties": _FIELDS,
    "required": ["total"],
    "additionalProperties": False,
}
REPLACE = {
    "type": "object",
    "properties": {
        "resource_provider_generation": {"type": "integer"},
        "inventories": {
            "type": "object",
            "patternProperties": {RC_PATTERN: _RECORD},
        },
    },
    "required": ["resource_provider_generation", "inventories"],
    "additionalProperties": False,
}
