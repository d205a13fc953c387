"""GET /headroom: how many more consumers of one candidates request fit.

Not an upstream path. It takes exactly the query string of
GET /allocation_candidates at the same microversions (1.10 and later, the
same policy rule, the same 400s: ``parse_request``) plus two what-if
parameters, ``exclude_roots`` and ``add``, and answers with counts
(``allotment.candidates.headroom``; the contract is in doc/source/operating/headroom.md).
``limit`` lists that many roots (the total counts them all).

``add`` takes ``<count>x<inventories>``, the inventories as
``CLASS:TOTAL[*RATIO]`` separated by commas: ``10xVCPU:64*4,MEMORY_MB:262144``
is ten hosts of 64 VCPU at allocation ratio 4 and 256 GiB of memory.
"""

from __future__ import annotations

import math
import re
import uuid as uuidlib
from typing import ClassVar

import falcon

from allotment import errors, refusals
from allotment.candidates import headroom
from allotment.handlers.base import Resource
from allotment.http import render
from allotment.http.candidates_query import parse_request
from allotment.http.context import Request
from allotment.http.errors import explain as word_refusals
from allotment.http.operations import Operation, Schema, ok
from allotment.http.request import Query, client_gone, excerpt, is_uuid_like, query
from allotment.ledger import capacity
from allotment.schemas import allocation_candidates as candidates
from allotment.schemas import responses as r
from allotment.schemas.common import RC_PATTERN

EXCLUDE_ROOTS = "exclude_roots"
ADD = "add"

# <count>x<CLASS>:<total>[*<ratio>],...
_TEMPLATE = re.compile(r"([0-9]{1,6})x(.+)", re.DOTALL)
_RECORD = re.compile(r"([A-Z0-9_]+):([0-9]{1,10})(?:\*([0-9]{1,12}(?:\.[0-9]{1,12})?))?")
# In capitals, not <count>...: an error's detail loses anything tag-like, as
# upstream's WebOb bodies do (``http.errors``).
_ADD_FORM = ("Expected 'add' in the form COUNTxCLASS:TOTAL[*ALLOCATION_RATIO],..., "
             "e.g. 10xVCPU:64*4.0,MEMORY_MB:262144,DISK_GB:2000")


def _bad(detail: str) -> errors.BadRequest:
    return errors.BadRequest(f"Invalid query string parameters: {detail}",
                             code=errors.QUERYPARAM_BAD_VALUE)


def parse_exclude_roots(values: list[str]) -> tuple[str, ...]:
    """``exclude_roots=<uuid>,<uuid>`` (repeatable): the uuids, canonical, once each."""
    found: dict[str, None] = {}
    for value in values:
        for part in value.split(","):
            text = part.strip()
            if not is_uuid_like(text):
                raise _bad(f"Expected '{EXCLUDE_ROOTS}' to be a comma-separated list of "
                           f"resource provider uuids. Got: {excerpt(value)}")
            found[str(uuidlib.UUID(text))] = None
    return tuple(found)


def parse_template(value: str) -> headroom.HostTemplate:
    """One ``add`` value: ``<count>x<CLASS>:<total>[*<ratio>],...``."""
    whole = _TEMPLATE.fullmatch(value)
    if whole is None:
        raise _bad(f"{_ADD_FORM}. Got: {excerpt(value)}")
    count = int(whole.group(1))
    if not 1 <= count <= headroom.MAX_ADDED_HOSTS:
        raise _bad(f"'{ADD}' imagines 1 to {headroom.MAX_ADDED_HOSTS} hosts. Got: {count}")
    records: dict[str, tuple[str, int, float]] = {}
    for item in whole.group(2).split(","):
        found = _RECORD.fullmatch(item)
        if found is None:
            raise _bad(f"{_ADD_FORM}. Got: {excerpt(item)} in {excerpt(value)}")
        name, total_text, ratio_text = found.groups()
        total = int(total_text)
        if not 1 <= total <= capacity.MAX_INT:
            raise _bad(f"'{ADD}': the total of {name} must be 1 to {capacity.MAX_INT}. "
                       f"Got: {total}")
        ratio = float(ratio_text) if ratio_text is not None else 1.0
        if not (0 < ratio <= capacity.MAX_RATIO and math.isfinite(ratio)):
            raise _bad(f"'{ADD}': the allocation ratio of {name} must be above 0. "
                       f"Got: {ratio_text}")
        if name in records:
            raise _bad(f"'{ADD}' names {name} twice in {excerpt(value)}")
        records[name] = (name, total, ratio)
    return headroom.HostTemplate(count, tuple(records.values()), value)


def take_what_if(q: Query) -> headroom.WhatIf:
    """``exclude_roots`` and ``add`` (each repeatable), removed from ``q``."""
    templates = q.take(ADD)
    if len(templates) > headroom.MAX_TEMPLATES:
        raise _bad(f"'{ADD}' may be given at most {headroom.MAX_TEMPLATES} times (host "
                   f"types to imagine). Got: {len(templates)}")
    return headroom.WhatIf(
        exclude_roots=parse_exclude_roots(q.take(EXCLUDE_ROOTS)),
        add=tuple(parse_template(value) for value in templates))


def _with_what_if(query: Schema) -> Schema:
    """The candidates query string, plus headroom's own parameters."""
    own = {
        EXCLUDE_ROOTS: {"type": "string",
                        "description": "Root provider uuids, comma-separated: count as if "
                                       "these trees were gone (hosts drained for "
                                       "maintenance). Repeatable."},
        ADD: {"type": "string",
              "pattern": rf"^[0-9]{{1,6}}x{RC_PATTERN[1:-1]}:[0-9]+(\*[0-9.]+)?"
                         rf"(,{RC_PATTERN[1:-1]}:[0-9]+(\*[0-9.]+)?)*$",
              "description": "Imagined hosts, <count>x<CLASS>:<total>[*<allocation_ratio>],"
                             "...: count as if that many root providers with these "
                             "inventories (no traits, no aggregates) were added. "
                             "Repeatable."},
    }
    properties = {**query.get("properties", {}), **own}
    if "limit" in properties:
        properties["limit"] = {**properties["limit"],
                               "description": "The most roots listed (most room first); "
                                              "the total counts them all."}
    return {**query, "properties": properties}


class Headroom(Resource):
    own_route = True
    # What the document says; ``take_what_if`` and ``parse_request`` check it.
    operations: ClassVar[dict[str, Operation]] = {
        "GET": Operation(
            "How many more consumers of this allocation candidates request fit, in all, "
            "per root provider and per aggregate; what if some trees were gone or hosts "
            "added (allotment's own)", (ok(200, r.HEADROOM),),
            rule="placement:allocation_candidates:list", since="allocation_candidates",
            query=lambda v: _with_what_if(candidates.query_schema(v))),
    }

    def on_get(self, req: Request, resp: falcon.Response) -> None:
        q = query(req)
        what_if = take_what_if(q)
        request = parse_request(q, req.context.version)
        with word_refusals(refusals.HEADROOM), \
                self.services.candidate_budget(client_gone(req)) as budget:
            found = headroom.answer(self.db, self.services.read_model, request, what_if,
                                    budget=budget)
        render.json_response(req, resp, found.as_dict())
