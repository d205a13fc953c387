"""GET /allocation_candidates: query parsing, version rules, rendering.

The query string becomes a ``CandidateRequest`` (plain data) with upstream's
exact checks and messages; ``allotment.candidates.engine`` does the search;
the answer is rendered in the shape of the requested microversion.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar

import falcon
import orjson
from oslo_config import cfg

from allotment import errors
from allotment.candidates import engine
from allotment.candidates.request import MAX_LIMIT, CandidateRequest, RequestGroup, Settings
from allotment.handlers.base import Resource
from allotment.http import filter_params, render
from allotment.http.context import Request
from allotment.http.errors import explain
from allotment.http.microversion import Version
from allotment.http.operations import Operation, ok
from allotment.http.request import Query, query, validate_query
from allotment.ledger.errors import UnknownResourceClass
from allotment.ledger.filters import AggregateFilter, TraitFilter
from allotment.schemas import allocation_candidates as schemas
from allotment.schemas import responses as r
from allotment.schemas.common import GROUP_PATTERN, GROUP_PATTERN_1_33

_GROUP_KEYS = "resources|required|member_of|in_tree"
_KEY = re.compile(rf"^({_GROUP_KEYS})({GROUP_PATTERN})?$")
_KEY_1_33 = re.compile(rf"^({_GROUP_KEYS})({GROUP_PATTERN_1_33})?$")


class _Group:
    """A request group while its parameters are being read."""

    def __init__(self, suffix: str) -> None:
        self.suffix = suffix
        self.resources: dict[str, int] = {}
        self.traits = TraitFilter()
        self.aggregates = AggregateFilter()
        self.in_tree: str | None = None

    def freeze(self) -> RequestGroup:
        return RequestGroup(
            suffix=self.suffix,
            resources=self.resources,
            required=tuple(frozenset(s) for s in self.traits.required),
            forbidden=frozenset(self.traits.forbidden),
            member_of=tuple(frozenset(s) for s in self.aggregates.required),
            forbidden_aggs=frozenset(self.aggregates.forbidden),
            in_tree=self.in_tree,
        )


def parse_groups(q: Query, version: Version) -> list[_Group]:
    """The request groups, in the order their first parameter appears."""
    pattern = _KEY_1_33 if version.has("string_group_suffix") else _KEY
    groups: dict[str, _Group] = {}
    for key, value in q.pairs:
        found = pattern.match(key)
        if not found:
            continue
        prefix, suffix = found.group(1), found.group(2) or ""
        group = groups.get(suffix)
        if group is None:
            group = groups[suffix] = _Group(suffix)
        if prefix == "resources":
            group.resources = filter_params.parse_resources(value)
        elif prefix == "required":
            group.traits = filter_params.parse_required(q, version, "required" + suffix)
        elif prefix == "member_of":
            group.aggregates = filter_params.parse_member_of(q, version, suffix)
        else:
            group.in_tree = filter_params.parse_in_tree(value)
    return list(groups.values())


def _check_groups(groups: list[_Group], same_subtrees: list[set[str]],
                  version: Version) -> None:
    if version.has("same_subtree"):
        resourceless = [g.suffix for g in groups if not g.resources]
        if len(resourceless) == len(groups):
            raise errors.BadRequest(
                "There must be at least one resources or resources[$S] parameter.",
                code=errors.QUERYPARAM_MISSING_VALUE)
        in_subtrees = [s for subtree in same_subtrees for s in sorted(subtree)]
        bad = [s for s in resourceless if s not in in_subtrees]
        if bad:
            raise errors.BadRequest(
                "Resourceless suffixed group request should be specified in `same_subtree` "
                f"query param: bad group(s) - {bad}.", code=errors.QUERYPARAM_BAD_VALUE)
        known = [g.suffix for g in groups]
        bad = list(dict.fromkeys(s for s in in_subtrees if s not in known))
        if bad:
            raise errors.BadRequest(
                f"Real suffixes should be specified in `same_subtree`: {bad} not found in "
                f"{known}.", code=errors.QUERYPARAM_BAD_VALUE)
    else:
        orphans = [f"required{g.suffix}" for g in groups
                   if g.traits.required and not g.resources]
        if orphans:
            raise errors.BadRequest(
                "All traits parameters must be associated with resources.  Found the "
                f"following orphaned traits keys: {', '.join(orphans)}")
        orphans = [f"member_of{g.suffix}" for g in groups
                   if g.aggregates and not g.resources]
        if orphans:
            raise errors.BadRequest(
                "All member_of parameters must be associated with resources. Found the "
                f"following orphaned member_of keys: {', '.join(orphans)}")
        if not all(g.resources for g in groups):
            raise errors.BadRequest("All request groups must specify resources.")
        if not groups:
            raise errors.BadRequest(
                "At least one request group (`resources` or `resources{$S}`) is required.")
    if version.has("forbidden_traits"):
        conflicts = sorted(
            f"required{g.suffix}: ({', '.join(sorted(any_of))})"
            for g in groups for any_of in g.traits.required
            if any_of <= g.traits.forbidden)
        if conflicts:
            raise errors.BadRequest(
                "Conflicting required and forbidden traits found in the following traits "
                f"keys: {', '.join(conflicts)}")


def parse_request(q: Query, version: Version) -> CandidateRequest:
    """A validated CandidateRequest, or a 400 with upstream's message."""
    validate_query(q, schemas.query_schema(version))
    # The first of repeated limit and group_policy values counts, as upstream.
    limit = None
    if "limit" in q:
        first = q.getall("limit")[0]
        if not re.fullmatch(r"[1-9][0-9]*", first):
            raise errors.BadRequest(
                f"Invalid query string parameters: '{first}' does not match "
                "'^[1-9][0-9]*$'")
        # Compared by length first: int() refuses thousands of digits.
        limit = MAX_LIMIT if len(first) > 10 else min(int(first), MAX_LIMIT)
    group_policy = q.getall("group_policy")[0] if "group_policy" in q else None
    root_required: set[str] = set()
    root_forbidden: set[str] = set()
    if "root_required" in q:
        values = q.getall("root_required")
        if len(values) > 1:
            raise errors.BadRequest(
                "Query parameter 'root_required' may be specified only once.",
                code=errors.ILLEGAL_DUPLICATE_QUERYPARAM)
        required, root_forbidden = filter_params.parse_trait_value(
            values[0], allow_forbidden=True, allow_any=False)
        root_required = set().union(*required)
        conflicts = root_required & root_forbidden
        if conflicts:
            raise errors.BadRequest(
                "Conflicting required and forbidden traits found in root_required: "
                f"{', '.join(sorted(conflicts))}", code=errors.QUERYPARAM_BAD_VALUE)
    same_subtrees: list[set[str]] = []
    for value in q.getall("same_subtree"):
        suffixes = {part.strip() for part in value.split(",")}
        if "" in suffixes:
            raise errors.BadRequest(
                "Empty string (unsuffixed group) can not be specified in `same_subtree` ",
                code=errors.QUERYPARAM_BAD_VALUE)
        same_subtrees.append(suffixes)

    groups = parse_groups(q, version)
    _check_groups(groups, same_subtrees, version)
    if group_policy is None and sum(1 for g in groups if g.suffix) > 1:
        raise errors.BadRequest(
            'The "group_policy" parameter is required when specifying more than one '
            '"resources{N}" parameter.')
    return CandidateRequest(
        groups=tuple(group.freeze() for group in groups),
        limit=limit,
        group_policy=group_policy,
        root_required=frozenset(root_required),
        root_forbidden=frozenset(root_forbidden),
        same_subtrees=tuple(frozenset(s) for s in same_subtrees),
        nested_aware=version.has("nested_candidates"),
    )


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
        self.require_version(req)
        self.authorize(req)
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
