"""Query-string schemas of the history routes (``/history/...``, allotment's own).

Unknown keys are refused (400). The schemas check forms; the handler checks
what they leave open (the ranges of ``limit`` and ``marker``, the timestamps).
"""

from __future__ import annotations

from typing import Any

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# The newest entry's id fits a signed 64-bit integer: so must a marker.
MAX_MARKER = 2**63 - 1

_UUID = {"type": "string",
         "pattern": "^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                    "[0-9a-fA-F]{12}$"}
_TIME_FORM = ("An ISO 8601 date or time (UTC unless it names an offset), e.g. "
              "2026-12-03T18:00:00Z.")
_TIME = {"type": "string", "maxLength": 64}
_PAGE = {
    "limit": {"type": "string", "pattern": "^[0-9]{1,4}$",
              "description": f"Entries per page, 1 to {MAX_LIMIT} (default {DEFAULT_LIMIT})."},
    "marker": {"type": "string", "pattern": "^[0-9]{1,19}$",
               "description": "The previous page's next_marker: the entries older than it."},
    "since": {**_TIME, "description": "Entries recorded at or after this time. "
                                      + _TIME_FORM},
    "until": {**_TIME, "description": "Entries recorded before this time. "
                                      + _TIME_FORM},
}

ALLOCATIONS_QUERY: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        **_PAGE,
        "consumer_uuid": {**_UUID, "description": "Only this consumer's changes."},
        "resource_provider_uuid": {**_UUID, "description": "Only changes on this provider."},
        "project_id": {"type": "string", "minLength": 1, "maxLength": 255,
                       "description": "Only changes of consumers of this project (as it "
                                      "was when the change was made)."},
    },
}
INVENTORIES_QUERY: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        **_PAGE,
        "resource_provider_uuid": {**_UUID, "description": "Only this provider's changes."},
    },
}
