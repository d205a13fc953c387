"""History entries as the API shows them (``/history/...`` and the audit's evidence)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from allotment.ledger.history import AllocationChange, InventoryChange


def timestamp(at: datetime.datetime) -> str:
    """Naive UTC as ISO 8601 with a ``Z``, to the microsecond."""
    return at.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _render(change: AllocationChange | InventoryChange) -> dict[str, Any]:
    body = dataclasses.asdict(change)
    body["at"] = timestamp(change.at)
    return body


def render_allocation_change(change: AllocationChange) -> dict[str, Any]:
    return _render(change)


def render_inventory_change(change: InventoryChange) -> dict[str, Any]:
    return _render(change)
