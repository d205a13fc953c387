"""GET /allocation_candidates.

The query string becomes a ``CandidateRequest`` (plain data) with upstream's
exact checks and messages (``http.candidates_query.parse_request``);
``allotment.candidates.engine`` does the search; the answer is rendered in the
shape of the requested microversion (``http.candidates_render``).
"""

from __future__ import annotations

from typing import ClassVar

import falcon

from allotment import refusals
from allotment.candidates import engine
from allotment.candidates.request import Settings
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.candidates_query import parse_request
from allotment.http.candidates_render import render_json
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.operations import Operation, ok
from allotment.http.request import client_gone, query
from allotment.schemas import allocation_candidates as schemas
from allotment.schemas import responses as r


class AllocationCandidates(Resource):
    # ``parse_request`` validates the query string with ``query`` (as explain's does).
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "List allocation candidates", (ok(200, r.ALLOCATION_CANDIDATES),),
            rule="placement:allocation_candidates:list", since="allocation_candidates",
            query=schemas.query_schema),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        version = req.context.version
        request = parse_request(query(req), version)
        with explain(refusals.ALLOCATION_CANDIDATES), \
                self.services.candidate_budget(client_gone(req)) as budget:
            result = engine.answer(self.db, self.services.read_model, request,
                                   Settings.from_conf(self.conf), budget,
                                   observer=self.services.counters)
            body = render_json(version, request, result)
            del result  # the memory a large answer took is soon given back (budget.close)
        render.json_response(req, resp, body)
