"""GET /explain/allocation_candidates: the candidates, and why trees are left out.

Not an upstream path. It takes exactly the query string of
GET /allocation_candidates at the same microversions (1.10 and later, the
same policy rule, the same 400s) plus ``explain_limit``, and answers the
same body with an ``explanation`` key (``allotment.candidates.explain``;
the contract is in doc/source/operating/explain.md).
"""

from __future__ import annotations

import re
from typing import ClassVar

import falcon

from allotment import errors, refusals
from allotment.candidates import explain as diagnosis
from allotment.candidates.request import Settings
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.candidates_query import parse_request
from allotment.http.candidates_render import render_body
from allotment.http.context import Request
from allotment.http.errors import explain as word_refusals
from allotment.http.operations import Operation, Schema, ok
from allotment.http.request import Query, client_gone, excerpt, query
from allotment.schemas import allocation_candidates as candidates
from allotment.schemas import responses as r

EXPLAIN_LIMIT = "explain_limit"
DEFAULT_EXPLAIN_LIMIT = 10
MAX_EXPLAIN_LIMIT = 1000


def take_explain_limit(q: Query) -> int:
    """``explain_limit`` (1..1000, default 10), removed from ``q``.

    What is left is the query string of GET /allocation_candidates, parsed
    as that endpoint parses it.
    """
    values = q.take(EXPLAIN_LIMIT)
    if not values:
        return DEFAULT_EXPLAIN_LIMIT
    if len(values) > 1:
        raise errors.BadRequest(f"Query parameter '{EXPLAIN_LIMIT}' may be specified only "
                                "once.", code=errors.ILLEGAL_DUPLICATE_QUERYPARAM)
    value = values[0]
    if not re.fullmatch(r"[0-9]{1,4}", value) or not 1 <= int(value) <= MAX_EXPLAIN_LIMIT:
        raise errors.BadRequest(
            f"Invalid query string parameters: '{EXPLAIN_LIMIT}' must be an integer from 1 "
            f"to {MAX_EXPLAIN_LIMIT}. Got: {excerpt(value)}", code=errors.QUERYPARAM_BAD_VALUE)
    return int(value)


def _with_explain_limit(query: Schema) -> Schema:
    """The candidates query string, plus explain's own ``explain_limit``."""
    limit = {"type": "string", "pattern": "^[0-9]{1,4}$",
             "description": f"Excluded trees described in full, 1 to {MAX_EXPLAIN_LIMIT} "
                            f"(default {DEFAULT_EXPLAIN_LIMIT})."}
    return {**query, "properties": {**query.get("properties", {}), EXPLAIN_LIMIT: limit}}


class ExplainAllocationCandidates(Resource):
    own_route = True
    # What the document says; ``take_explain_limit`` and ``parse_request`` check it.
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "Allocation candidates, and why each tree that did not qualify was left out "
            "(allotment's own)", (ok(200, r.EXPLAIN_CANDIDATES),),
            rule="placement:allocation_candidates:list", since="allocation_candidates",
            query=lambda v: _with_explain_limit(candidates.query_schema(v))),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        q = query(req)
        sample_limit = take_explain_limit(q)
        request = parse_request(q, version)
        settings = Settings.from_conf(self.conf)
        with word_refusals(refusals.ALLOCATION_CANDIDATES_EXPLAIN), \
                self.services.candidate_budget(client_gone(req)) as budget:
            result, explanation = diagnosis.answer_and_explain(
                self.db, self.services.read_model, request, settings, sample_limit,
                budget=budget, observer=self.services.counters)
        body = render_body(version, request, result)
        body["explanation"] = explanation.as_dict()
        render.json_response(req, resp, body)
