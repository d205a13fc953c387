"""Patterns shared by several schemas."""

from __future__ import annotations

from typing import Any

UUID_PATTERN = "^[0-9a-fA-F-]{36}$"
RC_PATTERN = "^[A-Z0-9_]+$"
CUSTOM_RC_PATTERN = "^CUSTOM_[A-Z0-9_]+$"
CUSTOM_TRAIT_PATTERN = "^CUSTOM_[A-Z0-9_]+$"
CONSUMER_TYPE_PATTERN = "^[A-Z0-9_]+$"
CONSUMER_TYPE_GET_PATTERN = "^[A-Z0-9_]+$|^all|^unknown$"
GROUP_PATTERN = r"[1-9][0-9]*"
GROUP_PATTERN_1_33 = r"[a-zA-Z0-9_-]{1,64}"

NULLABLE_UUID = {"anyOf": [{"type": "string", "format": "uuid"}, {"type": "null"}]}


def extend(schema: dict, **properties: dict[str, Any]) -> dict:
    """A copy of an object schema with more (or replaced) properties."""
    new = dict(schema)
    new["properties"] = {**schema["properties"], **properties}
    return new


def without(schema: dict, *names: str) -> dict:
    new = dict(schema)
    new["properties"] = {k: v for k, v in schema["properties"].items() if k not in names}
    return new
