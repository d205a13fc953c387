"""Reading requests: JSON bodies, query strings and JSON Schema validation."""

from __future__ import annotations

import copy
import json
import uuid as uuidlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote_to_bytes

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from jsonschema import Draft4Validator

from allotment import errors
from allotment.http import patterns
from allotment.http.context import Request

_FORMAT_CHECKER = jsonschema.FormatChecker()
# Draft 4, with the patterns' ``$`` meaning the end of the text (``http.patterns``).
SchemaValidator = jsonschema.validators.extend(Draft4Validator, patterns.KEYWORDS)


def is_uuid_like(value: object) -> bool:
    """Upstream's notion of a uuid: 32 hex digits, dashes optional."""
    if not isinstance(value, str):
        return False
    try:
        return str(uuidlib.UUID(value)).replace("-", "") == value.replace("-", "").lower()
    except (ValueError, AttributeError):
        return False


@_FORMAT_CHECKER.checks("uuid")
def _check_uuid(instance: object) -> bool:
    return is_uuid_like(instance) if isinstance(instance, str) else True


# Schemas are module-level constants: one compiled validator per schema object
# (the schema is kept in the value so its id cannot be reused).
_VALIDATORS: dict[int, tuple[Mapping, Any]] = {}


def _validator(schema: Mapping) -> Any:
    entry = _VALIDATORS.get(id(schema))
    if entry is None or entry[0] is not schema:
        if len(_VALIDATORS) > 512:  # only if someone builds schemas per request
            _VALIDATORS.clear()
        entry = (schema, SchemaValidator(schema, format_checker=_FORMAT_CHECKER))
        _VALIDATORS[id(schema)] = entry
    return entry[1]


def validate(data: Any, schema: Mapping, what: str = "JSON") -> None:
    """Validate ``data`` against ``schema``; 400 with the first error otherwise."""
    validator = _validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is None:
        return
    # The full text (with "Failed validating ...") is what upstream shows,
    # but a long value is shown as an excerpt, not twice in full.
    if what == "JSON":
        raise errors.BadRequest(f"JSON does not validate: {_describe(error)}")
    raise errors.BadRequest(f"Invalid query string parameters: {_describe(error)}")


EXCERPT = 200  # characters of a long bad value an error message repeats
LONG_VALUE = 1000  # a value shown whole up to this length, as upstream shows it


def excerpt(text: str, limit: int = EXCERPT) -> str:
    """``text``, or its start and length when it is longer than ``limit``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class _Shown:
    """Stands for a value in jsonschema's message: ``repr`` is the excerpt."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _describe(error: jsonschema.exceptions.ValidationError) -> str:
    """jsonschema's full message, with a long value cut to an excerpt (both places)."""
    shown = repr(error.instance)
    if len(shown) <= LONG_VALUE:
        return str(error)
    short = copy.copy(error)
    short.message = excerpt(error.message.replace(shown, excerpt(shown)), 2 * LONG_VALUE)
    short.instance = _Shown(excerpt(shown))
    return str(short)


def require_json(req: Request) -> None:
    """415 unless the body is declared JSON (upstream checks this before policy)."""
    content_type = req.content_type
    # Compared as written, as upstream (WebOb) does: APPLICATION/JSON is a 415.
    media = content_type.split(";")[0].strip() if content_type else None
    if media != "application/json":
        raise errors.PlacementError(
            f"The media type {media} is not supported, use application/json",
            status=415,
        )


NUL_REFUSED = "holds a NUL character (\\u0000), which no name or id may contain"
SURROGATE_REFUSED = ("holds an unpaired surrogate (\\ud800-\\udfff), which is not valid "
                     "Unicode")


def text_fault(text: str) -> str | None:
    """Why no database can store ``text`` (None when it is storable).

    PostgreSQL refuses NUL in text and every driver refuses lone surrogates;
    the others would store a NUL, so it is refused everywhere, the same way.
    """
    if "\x00" in text:
        return NUL_REFUSED
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return SURROGATE_REFUSED
    return None


def require_utf8_path(req: Request) -> None:
    """400 unless the request's path is UTF-8, as a query string must be (``Query``).

    The WSGI server hands the path over as bytes (a latin-1 ``str``); Falcon
    turns what is no UTF-8 (a lone surrogate's bytes, ``%ED%A0%80``) into U+FFFD,
    which would then be looked up as a name. Both the decoded path and the URI as
    sent (``REQUEST_URI``, waitress's; ``RAW_URI``, gunicorn's and Falcon's test
    client's, which decodes the path itself) are checked. allotment's own routes
    with path fields call this; upstream's answer such a path as upstream does.
    """
    env = req.env
    sent = env.get("REQUEST_URI") or env.get("RAW_URI") or ""
    try:
        env.get("PATH_INFO", "").encode("latin-1").decode("utf-8")
        unquote_to_bytes(sent.partition("?")[0]).decode("utf-8")
    except UnicodeError:
        raise errors.BadRequest("Invalid path: its percent-escapes are no UTF-8 (a lone "
                                "surrogate, \\ud800-\\udfff, is not valid Unicode)") from None


def _first_text_fault(value: Any) -> str | None:
    """``text_fault`` of the first bad string (key or value) in a JSON document."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            fault = text_fault(item)
            if fault:
                return fault
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{excerpt(text, 40)} is too large for a number")
    return number


def _nested_deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def json_body(req: Request, schema: Mapping | None = None) -> Any:
    """The request's JSON document, validated; 415/400 when it is not one."""
    require_json(req)
    raw = req.bounded_stream.read()
    limit = req.context.max_json_depth
    try:
        # NaN and Infinity are no JSON (Python's parser takes them), and a
        # number too large for a double would become one.
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant,
                          parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError) as exc:
        raise errors.BadRequest(f"Malformed JSON: {excerpt(str(exc))}") from None
    except RecursionError:
        data = None  # deeper than the parser goes: far deeper than the limit
    if (data is None and raw.strip() != b"null") or _nested_deeper_than(data, limit):
        raise errors.BadRequest(f"Malformed JSON: arrays and objects nest deeper than "
                                f"{limit} levels") from None
    # NUL and lone surrogates can only come as \u escapes.
    if b"\\u" in raw:
        fault = _first_text_fault(data)
        if fault:
            raise errors.BadRequest(f"Malformed JSON: a string {fault}")
    if schema is not None:
        validate(data, schema)
    return data


def accept_ranges(accept: str) -> list[tuple[str, float]]:
    """The media ranges of an Accept header with their q values."""
    ranges = []
    for item in accept.split(","):
        parts = [p.strip() for p in item.split(";")]
        q = 1.0
        for param in parts[1:]:
            if param.startswith("q="):
                try:
                    q = float(param[2:])
                except ValueError:
                    q = 0.0
        ranges.append((parts[0].lower(), q))
    return ranges


def accepts_json(accept: str) -> bool:
    return any(media in ("application/json", "application/*", "*/*") and q > 0
               for media, q in accept_ranges(accept))


class Query:
    """A multi-valued view of the query string, in request order."""

    def __init__(self, query_string: str) -> None:
        try:
            # Percent-escapes must decode as UTF-8 (a bare %FF is refused,
            # not turned into U+FFFD and matched against names).
            self.pairs = parse_qsl(query_string, keep_blank_values=True,
                                   strict_parsing=False, errors="strict")
        except UnicodeDecodeError as exc:
            raise errors.BadRequest(f"Invalid query string parameters: {exc}") from None
        except ValueError as exc:
            raise errors.BadRequest(f"Invalid query string: {exc}") from None
        if "%00" in query_string:
            for pair in self.pairs:
                for text in pair:
                    if "\x00" in text:
                        raise errors.BadRequest(
                            f"Invalid query string parameters: {excerpt(pair[0], 40)!r} "
                            f"{NUL_REFUSED}")
        self.multi: dict[str, list[str]] = {}
        for key, value in self.pairs:
            self.multi.setdefault(key, []).append(value)

    def __contains__(self, key: str) -> bool:
        return key in self.multi

    def keys(self) -> list[str]:
        return list(self.multi)

    def get(self, key: str, default: str | None = None) -> str | None:
        values = self.multi.get(key)
        return values[-1] if values else default

    def value(self, key: str) -> str:
        """The last value of a key the caller knows is present (``KeyError`` if not)."""
        return self.multi[key][-1]

    def getall(self, key: str) -> list[str]:
        return self.multi.get(key, [])

    def take(self, key: str) -> list[str]:
        """The values of ``key``, removed from the query: what is left is read as
        another endpoint reads its own (explain's and headroom's parameters, then
        the candidates' query string)."""
        values = self.multi.pop(key, [])
        if values:
            self.pairs = [(k, value) for k, value in self.pairs if k != key]
        return values

    def single_dict(self) -> dict[str, str]:
        """Last value for each key, for schema validation."""
        return {key: values[-1] for key, values in self.multi.items()}


def query(req: Request) -> Query:
    return Query(req.query_string or "")


def validate_query(q: Query, schema: Mapping) -> None:
    validate(q.single_dict(), schema, what="query")


def client_gone(req: Request) -> Callable[[], bool] | None:
    """waitress's test for a client that closed its connection, when serving under it
    (a long search or audit stops when its client has gone)."""
    test = req.env.get("waitress.client_disconnected")
    return test if callable(test) else None
