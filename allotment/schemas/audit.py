"""The query string of GET /audit/allocations (``allotment.handlers.audit``).

The handler checks ``limit`` and ``kind`` itself (every value of a repeated
``kind``, with Placement's error codes); this schema refuses other keys and
describes the two for the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from allotment.ledger.audit import KINDS

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000

QUERY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "limit": {"type": "string", "pattern": "^[0-9]{1,4}$",
                  "description": f"Findings of each kind at most, 1 to {MAX_LIMIT} "
                                 f"(default {DEFAULT_LIMIT}); counts are always complete."},
        "kind": {"type": "string",
                 "description": "Only findings of these kinds (comma-separated, or the key "
                                f"repeated): {', '.join(KINDS)}. Counts cover every kind."},
    },
    "additionalProperties": False,
}
