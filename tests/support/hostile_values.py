"""Hostile values, and the places of a described request body that can hold one.

Used by ``tests/test_fuzz.py`` (``test_hostile_values``). Three domains:

* numbers (``NUMBERS``): NaN and the infinities, which JSON has not but Python's
  parser takes as the raw tokens ``NaN``, ``Infinity`` and ``-Infinity``; numbers
  at and past the ends of float32 and float64 (1e38, 3.4e38, 1e308, -1e308) and the
  smallest subnormal (5e-324);
* integers past the columns' types (``INTEGERS``): 2^31-1 to 10^20 and their
  negatives;
* characters that databases refuse in text (``CHARACTERS``): NUL and lone
  surrogates, sent as JSON escapes (``\\u0000``, ``\\ud800``, ``\\udfff``) in bodies
  and as percent-escapes in paths and queries (``%00``; ``%ED%A0%80`` and
  ``%ED%BF%BF``, a surrogate's bytes as UTF-8 would have them, which is no UTF-8);
* a newline at the end of a valid value (``TRAILING``, ``%0A``), which Python's ``$``
  lets through a pattern that JSON Schema's ``$`` refuses (``refused_by`` judges
  with JSON Schema's).

A base body (a valid request written with ``Generation``, ``ConsumerGeneration``
and ``Fresh`` where a value is only known when it is sent) is walked together with
its schema (``leaves``): each described field gives one ``Leaf``, the place a
hostile value goes (``put``). ``described`` lists every field a schema has, so that
a test can require the base bodies to hold them all.
"""

from __future__ import annotations

import copy
import json
import math
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import best_match

NUMBERS: tuple[float, ...] = (math.nan, math.inf, -math.inf, 1e38, 3.4e38, 1e308, -1e308,
                              5e-324)
_LARGE = (2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, 10**20)
INTEGERS: tuple[int, ...] = _LARGE + tuple(-n for n in _LARGE)
CHARACTERS: tuple[str, ...] = ("\x00", "\ud800", "\udfff")
# Each character as a path or query string carries it (a surrogate as UTF-8 would have it).
PERCENT = {c: quote(c.encode("utf-8", "surrogatepass"), safe="") for c in CHARACTERS}
# After a valid value in a path or query (the end a pattern's "$" means).
TRAILING = "\n"
TRAILING_PERCENT = "%0A"
# The numbers in a query string (no "+": it would read as a space).
QUERY_NUMBERS: tuple[str, ...] = ("NaN", "Infinity", "-Infinity", "1e38", "3.4e38", "1e308",
                                  "-1e308", "5e-324")

# The hostile values of a body field of each kind. An integer field gets the floats
# that stand for the others: the raw tokens, a whole one (an integer to JSON Schema
# 2020-12, not to draft 4) and a fraction.
FIELD_VALUES: dict[str, tuple[Any, ...]] = {
    "string": CHARACTERS,
    "integer": (*INTEGERS, math.nan, math.inf, -math.inf, 1e308, 5e-324),
    "number": NUMBERS + INTEGERS,
}
# And of a query slot (the text that replaces "{}" in its template).
SLOT_VALUES: dict[str, tuple[str, ...]] = {
    "string": tuple(PERCENT[c] for c in CHARACTERS),
    "integer": tuple(str(n) for n in INTEGERS) + QUERY_NUMBERS,
}


@dataclass(frozen=True)
class Generation:
    """Stands for provider ``uuid``'s generation when the request is sent."""

    uuid: str


@dataclass(frozen=True)
class ConsumerGeneration:
    """Stands for consumer ``uuid``'s generation (None: it has no allocations)."""

    uuid: str


@dataclass(frozen=True)
class Fresh:
    """Stands for a name no other request uses: ``uuid``, ``name`` or ``class``."""

    kind: str


PLACEHOLDERS = (Generation, ConsumerGeneration, Fresh)


def resolve(template: Any, value_of: Callable[[Any], Any]) -> Any:
    """``template`` with each placeholder replaced by ``value_of(placeholder)``."""
    if isinstance(template, PLACEHOLDERS):
        return value_of(template)
    if isinstance(template, dict):
        return {key: resolve(value, value_of) for key, value in template.items()}
    if isinstance(template, list):
        return [resolve(item, value_of) for item in template]
    return template


def insert(text: str, character: str) -> str:
    """``character`` in the middle of ``text`` (``"proj"`` -> ``"pr\\x00oj"``)."""
    middle = len(text) // 2
    return text[:middle] + character + text[middle:]


def to_json(body: Any) -> bytes:
    """``body`` as sent: NaN and the infinities as raw tokens, surrogates as escapes."""
    return json.dumps(body, allow_nan=True, ensure_ascii=True).encode("ascii")


@dataclass(frozen=True)
class Leaf:
    """One place of a body: the value (or, ``is_key``, the key) at ``steps``."""

    steps: tuple[str | int, ...]
    is_key: bool
    kind: str  # "string", "integer" or "number"
    field: str  # the described field: "inventories.*.total", "traits[]", "*(key)"


def _branches(schema: dict) -> list[dict]:
    """The alternatives of ``schema`` that are not null."""
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            return [branch for branch in schema[keyword] if branch.get("type") != "null"]
    return [schema]


def _types(schema: dict) -> set[str]:
    types: set[str] = set()
    for branch in _branches(schema):
        kind = branch.get("type")
        types.update([kind] if isinstance(kind, str) else kind or ())
        if "properties" in branch or "patternProperties" in branch:
            types.add("object")
    return types


def _scalar(schema: dict) -> str | None:
    types = _types(schema)
    return next((kind for kind in ("string", "integer", "number") if kind in types), None)


def _object(schema: dict) -> dict:
    return next(branch for branch in _branches(schema) if "object" in _types(branch))


def _array(schema: dict) -> dict:
    return next(branch for branch in _branches(schema) if "array" in _types(branch))


def _join(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


def _member(schema: dict, key: str, field: str) -> tuple[dict, str, bool]:
    """The schema of member ``key`` of an object, its field, and whether the key is
    data (matched by a pattern) rather than a property name."""
    if key in schema.get("properties", {}):
        return schema["properties"][key], _join(field, key), False
    for pattern, member in schema.get("patternProperties", {}).items():
        if re.search(pattern, key):
            return member, _join(field, "*"), True
    raise ValueError(f"{_join(field, key)} is not described")


def leaves(template: Any, schema: dict) -> list[Leaf]:
    """The first place of each described field of ``template``, in its order."""
    found: dict[str, Leaf] = {}

    def walk(value: Any, schema: dict, steps: tuple[str | int, ...], field: str) -> None:
        if isinstance(value, dict):
            described = _object(schema)
            for key, member in value.items():
                member_schema, member_field, is_data = _member(described, key, field)
                if is_data:
                    found.setdefault(member_field + "(key)",
                                     Leaf((*steps, key), True, "string", member_field + "(key)"))
                walk(member, member_schema, (*steps, key), member_field)
        elif isinstance(value, list):
            items = _array(schema)["items"]
            for index, item in enumerate(value):
                walk(item, items, (*steps, index), field + "[]")
        else:
            kind = _scalar(schema)
            if kind is None:
                raise ValueError(f"{field} holds {value!r}, not a scalar")
            found.setdefault(field, Leaf(steps, False, kind, field))

    walk(template, schema, (), "")
    return list(found.values())


def described(schema: dict, field: str = "") -> set[str]:
    """Every field ``schema`` describes, named as ``Leaf.field`` names them."""
    types = _types(schema)
    if "object" in types:
        described_object = _object(schema)
        fields: set[str] = set()
        for name, member in described_object.get("properties", {}).items():
            fields |= described(member, _join(field, name))
        for member in described_object.get("patternProperties", {}).values():
            fields.add(_join(field, "*") + "(key)")
            fields |= described(member, _join(field, "*"))
        return fields
    if "array" in types:
        return described(_array(schema)["items"], field + "[]")
    return {field}


def put(body: Any, leaf: Leaf, value: Any) -> Any:
    """A copy of ``body`` with ``value`` at ``leaf``: a character goes into the text
    that is there, a number replaces what is there."""
    body = copy.deepcopy(body)
    *parents, last = leaf.steps
    container = body
    for step in parents:
        container = container[step]
    if leaf.is_key:
        assert isinstance(last, str)
        renamed = insert(last, value)
        items = [(renamed if key == last else key, member) for key, member in container.items()]
        container.clear()
        container.update(items)
    elif leaf.kind == "string":
        container[last] = insert(container[last], value)
    else:
        container[last] = value
    return body


def non_finite(value: Any) -> bool:
    """Whether ``value`` holds a NaN or an infinity anywhere."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(non_finite(member) for member in value.values())
    if isinstance(value, list):
        return any(non_finite(item) for item in value)
    return False


_FORMATS = FormatChecker()


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Any:
    """JSON Schema's ``pattern``: an ECMA-262 expression, whose ``$`` is the end of the
    text (Python's also matches before a final newline; the document's patterns
    escape no ``$``)."""
    if validator.is_type(instance, "string") and not re.search(pattern.replace("$", r"\Z"),
                                                               instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_DOCUMENT_VALIDATOR = validators.extend(Draft202012Validator, {"pattern": _ecma_pattern})


def refused_by(schema: dict, value: Any) -> str | None:
    """Why the document refuses ``value`` (None if it describes it as valid)."""
    if non_finite(value):
        return "JSON has no such number"
    error = best_match(_DOCUMENT_VALIDATOR(schema, format_checker=_FORMATS).iter_errors(value))
    return None if error is None else f"the document refuses it: {error.message[:200]}"


def server_error(exc_info: Any) -> tuple[str, str]:
    """A logged exception as (its type and where: the innermost frame of allotment, and
    the innermost of all when that is elsewhere; its message's first line)."""
    kind, exc, tb = exc_info
    frames = traceback.extract_tb(tb)
    ours = [frame for frame in frames if "/allotment/" in frame.filename]
    where = ""
    if ours:
        where = f" at {_short(ours[-1])}"
    if frames and frames[-1] not in ours:
        where += f" (raised in {_short(frames[-1])})"
    message = str(exc).strip().splitlines()
    return f"{kind.__name__}{where}", message[0][:300] if message else ""


def _short(frame: traceback.FrameSummary) -> str:
    filename = frame.filename
    for root in ("/allotment/", "/site-packages/"):
        if root in filename:
            filename = filename[filename.rindex(root) + 1:]
            break
    return f"{filename.removeprefix('site-packages/')}:{frame.lineno} {frame.name}"
