"""History entries and the audit's report as JSON, written once for every route.

``render_allocation_change`` and ``render_inventory_change`` turn the
``ledger.history`` records into the entries the history and audit routes
show; ``render_report`` is the body of GET /audit/allocations and of
``allotment audit --format json``. Times are ISO 8601 in UTC with a ``Z``.
"""

from __future__ import annotations

import datetime
from typing import Any

from allotment.ledger.audit import Finding, Report
from allotment.ledger.history import AllocationChange, InventoryChange


def iso_time(at: datetime.datetime) -> str:
    """``2026-12-03T18:42:19.157342Z`` (a naive time is UTC already)."""
    if at.tzinfo is not None:
        at = at.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return at.isoformat(timespec="microseconds") + "Z"


def _ratio(value: float | None) -> float | None:
    return None if value is None else float(value)


def render_allocation_change(c: AllocationChange) -> dict[str, Any]:
    return {"id": c.id, "at": iso_time(c.at), "consumer_uuid": c.consumer_uuid,
            "consumer_type": c.consumer_type, "project_id": c.project_id,
            "user_id": c.user_id, "resource_provider_uuid": c.resource_provider_uuid,
            "resource_class": c.resource_class, "used_before": c.used_before,
            "used_after": c.used_after, "request_id": c.request_id,
            "global_request_id": c.global_request_id, "writer": c.writer}


def render_inventory_change(c: InventoryChange) -> dict[str, Any]:
    return {"id": c.id, "at": iso_time(c.at), "resource_provider_uuid": c.resource_provider_uuid,
            "resource_provider_generation": c.resource_provider_generation,
            "resource_class": c.resource_class, "total_before": c.total_before,
            "total_after": c.total_after, "reserved_before": c.reserved_before,
            "reserved_after": c.reserved_after,
            "allocation_ratio_before": _ratio(c.allocation_ratio_before),
            "allocation_ratio_after": _ratio(c.allocation_ratio_after),
            "min_unit": c.min_unit, "max_unit": c.max_unit, "step_size": c.step_size,
            "request_id": c.request_id, "global_request_id": c.global_request_id,
            "writer": c.writer}


def _plain(value: Any) -> Any:
    """Evidence as JSON holds it: datetimes as ``iso_time``."""
    if isinstance(value, datetime.datetime):
        return iso_time(value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def render_finding(finding: Finding) -> dict[str, Any]:
    return {"kind": finding.kind, "summary": finding.summary,
            "consumer_uuid": finding.consumer_uuid,
            "resource_provider_uuid": finding.resource_provider_uuid,
            "resource_class": finding.resource_class,
            "evidence": _plain(finding.evidence),
            "history": {
                "allocations": [render_allocation_change(c)
                                for c in finding.allocation_history],
                "inventories": [render_inventory_change(c)
                                for c in finding.inventory_history]}}


def render_report(report: Report) -> dict[str, Any]:
    settings = report.settings
    return {"generated_at": iso_time(report.generated_at),
            "settings": {
                "migration_age": settings.migration_age,
                "incomplete_consumer_project_id": settings.incomplete_consumer_project_id,
                "incomplete_consumer_user_id": settings.incomplete_consumer_user_id},
            "counts": dict(report.counts),
            "findings": [render_finding(f) for f in report.findings]}
