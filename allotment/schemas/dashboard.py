"""Query-string schemas of the dashboard's data routes (``/dashboard/api/...``).

Each handler (``allotment.handlers.dashboard``) validates with its own, and
the OpenAPI document lists them. Each schema checks the last value of each
key; other keys are ignored. The upper bounds are the handlers' to check
(these only say "a whole number").
"""

from __future__ import annotations

from typing import Any

DEFAULT_PAGE = 50
MAX_PAGE = 500
DEFAULT_RANKING = 10
MAX_RANKING = 100
MAX_OFFSET = 10**9


def _whole(most: int, default: int, what: str) -> dict[str, Any]:
    return {"type": "string", "pattern": "^[0-9]+$",
            "description": f"{what}: a whole number up to {most} (default {default})."}


_LIMIT = _whole(MAX_PAGE, DEFAULT_PAGE, "How many at most")
_OFFSET = _whole(MAX_OFFSET, 0, "How many to skip")
_PAGE_KEYS = {"limit": _LIMIT, "offset": _OFFSET}
PAGE_QUERY = {"type": "object", "properties": _PAGE_KEYS}

PROVIDERS_QUERY = {"type": "object", "properties": {
    **_PAGE_KEYS,
    "q": {"type": "string",
          "description": "Keep the trees with a provider whose name contains this "
                         "(any case) or whose uuid it is."},
    "roots": {"type": "string",
              "description": "Keep the trees of these root provider uuids "
                             "(comma-separated)."},
}}
SUMMARY_QUERY = {"type": "object", "properties": {
    "limit": _whole(MAX_RANKING, DEFAULT_RANKING, "How many fullest and emptiest providers"),
    "resource_class": {"type": "string",
                       "description": "Rank by this resource class's inventories only."},
}}
MAX_NAMES = MAX_PAGE
PROVIDER_NAMES_QUERY = {"type": "object", "properties": {
    "uuids": {"type": "string",
              "description": f"Comma-separated provider uuids, up to {MAX_NAMES}."},
}}
NO_QUERY: dict[str, Any] = {"type": "object"}
