"""What one method of one route is, declared once on its handler class.

Each handler class (``allotment.handlers``) carries ``operations``: per HTTP
method, an ``Operation`` naming its policy rule, the microversion fact from
which it exists, the JSON Schemas it validates the body and query string
with at each microversion, and the answers it gives. One prologue applies
them before the responder runs (``Resource.prologue``, called by the
middleware once the route is known): the version gate, the body's media type
and the policy rule, in ``PROLOGUE``'s order or the operation's own where
upstream's differs. Responders read the body with its schema
(``Resource.read_body``, after the provider where upstream looks it up first)
and the query string with ``query_schema``; ``allotment.openapi`` builds the
document from the same objects, through the route table ``allotment.wsgi``
serves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from allotment.http.microversion import MAX_VERSION, MIN_VERSION, Version

Schema = dict[str, Any]

# One check of the prologue: the version gate (404, or 405 for a method gate),
# the body's media type where the operation reads a body at the request's
# version (415), the policy rule (403).
Step = Literal["version", "content_type", "policy"]
# The order upstream's handler decorators give most operations: the versioned
# handler is chosen first, ``require_content`` wraps it, the policy check is
# the handler's first line.
PROLOGUE: tuple[Step, ...] = ("version", "content_type", "policy")


@dataclass(frozen=True)
class Answer:
    """One response: status, body schema (None: no body), versions it is given at."""

    status: int
    schema: Schema | None
    description: str
    first: int = MIN_VERSION[1]
    last: int = MAX_VERSION[1]
    location: bool = False


@dataclass(frozen=True)
class Operation:
    summary: str
    answers: tuple[Answer, ...]
    # The policy rule the handler checks (None: no token, no policy: / and /openapi.json).
    rule: str | None = None
    # The microversion fact from which the operation exists (None: from 1.0).
    since: str | None = None
    # Refusal statuses besides the ones every operation may give.
    refusals: tuple[int, ...] = ()
    # The schema the handler validates the body / query string with, per version.
    body: Callable[[Version], Schema | None] | None = None
    query: Callable[[Version], Schema] | None = None
    # Before ``since``: a 404 (the URI is not there yet), or a 405 (a method gate).
    gated_by_method: bool = False
    path_params: dict[str, Schema] = field(default_factory=dict)
    # The configuration option without which the route is not there (404 then).
    requires_option: str | None = None
    description: str | None = None
    # When a GET whose Accept rules JSON out is refused (406), as upstream's
    # handler decorators order it: after the version gate (a request before
    # ``since`` is the gate's 404 first), before it, or never (the answer is
    # sent whatever Accept says).
    accept: Literal["after_gate", "before_gate"] | None = "after_gate"
    # The order of the prologue's checks, where upstream's is not ``PROLOGUE``'s.
    prologue: tuple[Step, ...] = PROLOGUE
    # Upstream looks the provider of the URI up before it reads the body: a body
    # that is no JSON, or fails ``body``, is the provider's 404 when it is gone
    # (``Resource.read_body``).
    body_after_provider: bool = False

    def reads_body(self, version: Version) -> bool:
        """Does the operation read a JSON body at ``version`` (415 for another type)?"""
        return self.body is not None and self.body(version) is not None

    def negotiates_accept(self, version: Version) -> bool:
        """Is a request at ``version`` refused 406 when its Accept rules JSON out?"""
        if self.accept is None:
            return False
        if self.accept == "before_gate" or self.since is None:
            return True
        return version.has(self.since)


class Described(Protocol):
    """A handler class, as the OpenAPI document reads it."""

    operations: ClassVar[dict[str, Operation]]


def ok(status: int, schema: Schema | None, description: str = "Success", **kw: Any) -> Answer:
    return Answer(status, schema, description, **kw)


NO_BODY = None
# The refusals a write may give besides the common ones: a bad body, a conflict.
WRITE_REFUSALS = (400, 409)

# The URI templates' fields, as the document describes them.
UUID_PARAM = {"uuid": {"type": "string", "description": "A resource provider's uuid."}}
RC_PARAM = {"resource_class": {"type": "string", "description": "A resource class name."}}
NAME_PARAM = {"name": {"type": "string"}}
CONSUMER_PARAM = {"consumer_uuid": {"type": "string", "description": "A consumer's uuid."}}
