"""GET /audit/allocations: what looks wrong in the database now, and why.

allotment's own route, not Placement's: there at every microversion (it
changes with none), guarded by ``allotment:audit:allocations`` (admin only
by default). Query string: ``limit`` (findings of each kind at most, 1 to
1000, default 100) and ``kind`` (one or more kind names, comma-separated or
repeated). The findings and their rules are ``allotment.ledger.audit``'s;
the body is ``allotment.http.history_render.render_report``'s. It reads in
one snapshot and changes nothing (doc/source/operating/history.md, "Audit"), holding one of
the worker's large-search slots, within ``candidates_time_limit``.
"""

from __future__ import annotations

import re
from typing import ClassVar

import falcon

from allotment import errors, policy, refusals
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.context import Request
from allotment.http.errors import explain as word_refusals
from allotment.http.history_render import render_report
from allotment.http.operations import Operation, ok
from allotment.http.request import Query, client_gone, excerpt, query, validate_query
from allotment.ledger import audit
from allotment.schemas import audit as schema
from allotment.schemas import responses as r


def parse_limit(q: Query) -> int:
    """``limit``: 1..1000, default 100, given at most once."""
    values = q.getall("limit")
    if not values:
        return schema.DEFAULT_LIMIT
    if len(values) > 1:
        raise errors.BadRequest("Query parameter 'limit' may be specified only once.",
                                code=errors.ILLEGAL_DUPLICATE_QUERYPARAM)
    value = values[0]
    if not re.fullmatch(r"[0-9]{1,4}", value) or not 1 <= int(value) <= schema.MAX_LIMIT:
        raise errors.BadRequest(
            f"Invalid query string parameters: 'limit' must be an integer from 1 to "
            f"{schema.MAX_LIMIT}. Got: {excerpt(value)}", code=errors.QUERYPARAM_BAD_VALUE)
    return int(value)


def parse_kinds(q: Query) -> list[str]:
    """``kind``: every value, each a comma-separated list of kind names (all when absent)."""
    values = q.getall("kind")
    if not values:
        return list(audit.KINDS)
    kinds = [name.strip() for value in values for name in value.split(",")]
    unknown = [name for name in kinds if name not in audit.KINDS]
    if unknown or not kinds:
        raise errors.BadRequest(
            f"Invalid query string parameters: unknown finding kind "
            f"{excerpt(', '.join(unknown) or repr(''))}; the kinds are "
            f"{', '.join(audit.KINDS)}.", code=errors.QUERYPARAM_BAD_VALUE)
    return list(dict.fromkeys(kinds))


class AuditAllocations(Resource):
    own_route = True
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Audit: what looks wrong in allocations and inventories now, each finding "
            "with its evidence and history (allotment's own)", (ok(200, r.AUDIT),),
            rule=policy.AUDIT_ALLOCATIONS, query=lambda v: schema.QUERY,
            description="allotment's own, not Placement's "
                        "(doc/source/operating/history.md, \"Audit\"), "
                        "at every microversion. Finding kinds: over_capacity, "
                        "empty_consumer, old_migration, allocation_without_inventory, "
                        "incomplete_consumer. `counts` are complete; `findings` hold at "
                        "most `limit` of each kind asked for. Read-only. Policy rule "
                        f"`{policy.AUDIT_ALLOCATIONS}` (default: admin)."),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        limit = parse_limit(q)
        kinds = parse_kinds(q)
        validate_query(q, schema.QUERY)  # other keys
        settings = audit.Settings.from_conf(self.conf)
        # Whole-table reads, seconds on a large cloud: run under the candidates
        # budget, holding one of the worker's large-search slots (taken before
        # anything is read; none free: 503 at once), within its time limit, and
        # stopped when the client has gone.
        with word_refusals(refusals.AUDIT), \
                self.services.candidate_budget(client_gone(req)) as budget:
            budget.take_slot("is an audit")
            with self.db.snapshot() as conn:
                report = audit.audit(conn, settings, kinds, limit, check=budget.check)
        render.json_response(req, resp, render_report(report), cache_headers=False)
        resp.set_header("Cache-Control", "no-store")
