"""JSON Schemas for resource provider bodies and list queries, by version."""

from allotment.http.microversion import Version
from allotment.schemas.common import NULLABLE_UUID, extend, without

CREATE = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 200},
        "uuid": {"type": "string", "format": "uuid"},
    },
    "required": ["name"],
    "additionalProperties": False,
}
CREATE_1_14 = extend(CREATE, parent_provider_uuid=NULLABLE_UUID)
UPDATE = without(CREATE, "uuid")
UPDATE_1_14 = without(CREATE_1_14, "uuid")

LIST_1_0 = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "uuid": {"type": "string", "format": "uuid"},
    },
    "additionalProperties": False,
}
LIST_1_3 = extend(LIST_1_0, member_of={"type": "string"})
LIST_1_4 = extend(LIST_1_3, resources={"type": "string"})
LIST_1_14 = extend(LIST_1_4, in_tree={"type": "string", "format": "uuid"})
LIST_1_18 = extend(LIST_1_14, required={"type": "string"})


def list_schema(version: Version) -> dict:
    for minor, schema in ((18, LIST_1_18), (14, LIST_1_14), (4, LIST_1_4), (3, LIST_1_3)):
        if version.at_least(minor):
            return schema
    return LIST_1_0
