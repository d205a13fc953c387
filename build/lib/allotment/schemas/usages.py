"""Query-string schemas for GET /usages, by version."""

from __future__ import annotations

from allotment.http.microversion import Version
from allotment.schemas.common import CONSUMER_TYPE_GET_PATTERN, extend

_EXTERNAL_ID = {"type": "string", "minLength": 1, "maxLength": 255}

LIST_1_9 = {
    "type": "object",
    "properties": {"project_id": _EXTERNAL_ID, "user_id": _EXTERNAL_ID},
    "required": ["project_id"],
    "additionalProperties": False,
}
LIST_1_38 = extend(LIST_1_9, consumer_type={
    "type": "string",
    "pattern": CONSUMER_TYPE_GET_PATTERN,
    "minLength": 1,
    "maxLength": 255,
})


def list_schema(version: Version) -> dict:
    return LIST_1_38 if version.has("consumer_types") else LIST_1_9
