"""GET /allocation_candidates: query parsing, version rules, rendering.

The query string becomes a ``CandidateRequest`` (plain data) with upstream's
exact checks and messages (``http.candidates_query.parse_request``);
``allotment.candidates.engine`` does the search; the answer is rendered in the
shape of the requested microversion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import falcon
import orjson
from oslo_config import cfg

from allotment.candidates import engine
from allotment.candidates.request import CandidateRequest, Settings
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.candidates_query import parse_request
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.microversion import Version
from allotment.http.operations import Operation, ok
from allotment.http.request import query
from allotment.ledger.errors import UnknownResourceClass
from allotment.schemas import allocation_candidates as schemas
from allotment.schemas import responses as r


def settings_from_conf(conf: cfg.ConfigOpts) -> Settings:
    placement = conf.placement
    return Settings(randomize=placement.randomize_allocation_candidates,
                    max_candidates=placement.max_allocation_candidates,
                    strategy=placement.allocation_candidates_generation_strategy)


def render_json(version: Version, request: CandidateRequest, result: engine.Result) -> bytes:
    """The answer's JSON, in the shape of the microversion.

    Candidates are written as JSON text from pieces made once per answer
    (each provider's quoted uuid, each distinct set of amounts): tens of
    thousands of candidates share a handful of them, and building a dict per
    candidate and per allocation was most of the time of a large answer.
    The text is exactly what ``orjson`` makes of the same structure
    (``render_body``).
    """
    quoted = {rp: orjson.dumps(uuid) for rp, uuid in result.uuids.items()}
    class_name = result.class_names
    dict_format = version.has("allocations_dict_format")
    with_mappings = version.has("mappings")
    amounts_json: dict[tuple, bytes] = {}
    pieces: dict[tuple, bytes] = {}

    def piece(rp: int, by_rc: dict[int, int]) -> bytes:
        key = (rp, *by_rc.items())
        found = pieces.get(key)
        if found is None:
            amounts = key[1:]
            text = amounts_json.get(amounts)
            if text is None:
                text = amounts_json[amounts] = orjson.dumps(
                    {class_name[rc]: amount for rc, amount in by_rc.items()})
            if dict_format:
                found = quoted[rp] + b':{"resources":' + text + b"}"
            else:
                found = (b'{"resource_provider":{"uuid":' + quoted[rp] + b'},"resources":'
                         + text + b"}")
            pieces[key] = found
        return found

    mapping_json: dict[tuple[str, tuple[int, ...]], bytes] = {}

    def mapping(suffix: str, rps: tuple[int, ...]) -> bytes:
        text = mapping_json[(suffix, rps)] = (
            orjson.dumps(suffix) + b":[" + b",".join([quoted[rp] for rp in rps]) + b"]")
        return text

    # Candidates that differ only in their mappings share one allocations
    # dict (``search._candidate``): written once, by identity (every
    # candidate, hence every dict, stays alive while this runs).
    allocations_json: dict[int, bytes] = {}
    items = []
    for candidate in result.candidates:
        allocations = allocations_json.get(id(candidate.allocations))
        if allocations is None:
            allocations = allocations_json[id(candidate.allocations)] = b",".join(
                [piece(rp, by_rc) for rp, by_rc in candidate.allocations.items()])
        if not dict_format:
            items.append(b'{"allocations":[' + allocations + b"]}")
            continue
        if not with_mappings:
            items.append(b'{"allocations":{' + allocations + b"}}")
            continue
        mappings = b",".join([mapping_json.get((suffix, rps)) or mapping(suffix, rps)
                              for suffix, rps in candidate.mappings.items()])
        items.append(b'{"allocations":{' + allocations + b'},"mappings":{' + mappings + b"}}")
    return (b'{"allocation_requests":[' + b",".join(items) + b'],"provider_summaries":{'
            + b",".join(_summaries_json(version, request, result)) + b"}}")


def _summaries_json(version: Version, request: CandidateRequest,
                    result: engine.Result) -> list[bytes]:
    """Each provider summary's ``"uuid":{...}`` text (kept on the summary when
    it comes from the read model, per shape of the answer)."""
    all_classes = version.has("summaries_all_inventory")
    with_traits = version.has("candidates_required")
    with_tree = version.has("nested_candidates")
    requested = request.requested_classes()
    shown_classes = None if all_classes else frozenset(requested)
    summaries = []
    for summary in result.summaries.values():
        shape = (shown_classes, with_traits, with_tree, summary.parent_uuid, summary.root_uuid)
        text = summary.rendered.get(shape) if summary.rendered is not None else None
        if text is None:
            shown = summary.resources
            if not all_classes:
                shown = {rc: value for rc, value in shown.items() if rc in requested}
            body: dict[str, Any] = {"resources": shown}
            if with_traits:
                body["traits"] = summary.traits
            if with_tree:
                body["parent_provider_uuid"] = summary.parent_uuid
                body["root_provider_uuid"] = summary.root_uuid
            text = orjson.dumps(summary.uuid) + b":" + orjson.dumps(body)
            if summary.rendered is not None:
                summary.rendered[shape] = text
        summaries.append(text)
    return summaries


def render_body(version: Version, request: CandidateRequest, result: engine.Result) -> dict:
    """The answer as a structure (what ``render_json`` writes)."""
    body: dict = orjson.loads(render_json(version, request, result))
    return body


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
        with explain({UnknownResourceClass: lambda e: "Invalid resource class in resources "
                                                      f"parameter: {e}"}), \
                self.services.candidate_budget(client_gone(req)) as budget:
            result = engine.answer(self.db, self.services.read_model, request,
                                   settings_from_conf(self.conf), budget,
                                   observer=self.services.counters)
            body = render_json(version, request, result)
            del result  # the memory a large answer took is soon given back (budget.close)
        render.json_response(req, resp, body)


def client_gone(req: Request) -> Callable[[], bool] | None:
    """waitress's test for a client that closed its connection, when serving under it."""
    test = req.env.get("waitress.client_disconnected")
    return test if callable(test) else None
