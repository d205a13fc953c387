"""The answer of GET /allocation_candidates as JSON, in the shape of the microversion.

GET /allocation_candidates writes it (``render_json``); its explain adds its
``explanation`` to the same body as a structure (``render_body``).
"""

from __future__ import annotations

from typing import Any

import orjson

from allotment.candidates import engine
from allotment.candidates.request import CandidateRequest
from allotment.http.microversion import Version


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
