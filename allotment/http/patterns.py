"""JSON Schema's ``pattern``, ``patternProperties`` and ``additionalProperties``
with the end of text that JSON Schema means.

A schema's patterns are ECMA-262 regular expressions (JSON Schema says so, and
the OpenAPI document serves them to clients as written): there ``$`` is the end
of the text. In Python's ``re`` it also matches before a final newline, so
jsonschema's own keywords let ``"<uuid>\\n"`` through ``^...$`` and the value
reached code that refused it with a 500. These keywords search ``python_pattern``
of each pattern instead, where every such ``$`` is ``\\Z``; their messages name
the pattern as written, as jsonschema's do (clients match on them).

The regular expressions written in Python that check input follow the same
rule, the whole value must match: they are written without anchors and applied
with ``fullmatch``, never ``match`` or ``search`` with ``$``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from jsonschema import ValidationError
from jsonschema.protocols import Validator


@functools.lru_cache(maxsize=512)
def python_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` (ECMA-262) compiled for Python: each ``$`` outside a character
    class and not escaped becomes ``\\Z`` (the end of the text, never before a
    final newline)."""
    out: list[str] = []
    in_class = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            out.append(pattern[index:index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            # A "]" first in a class is a member, not its end.
            if pattern[index + 1:index + 2] == "]":
                out.append("[]")
                index += 2
                continue
        elif char == "$":
            char = r"\Z"
        out.append(char)
        index += 1
    return re.compile("".join(out))


def pattern(validator: Validator, patrn: str, instance: Any,
            schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not python_pattern(patrn).search(instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def pattern_properties(validator: Validator, patterns: Mapping[str, Any], instance: Any,
                       schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in patterns.items():
        for key, value in instance.items():
            if python_pattern(patrn).search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=patrn)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    properties = schema.get("properties", {})
    patterns = [python_pattern(p) for p in schema.get("patternProperties", {})]
    return [key for key in instance
            if key not in properties and not any(p.search(key) for p in patterns)]


def additional_properties(validator: Validator, allowed: Any, instance: Any,
                          schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            shown = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {shown}")
        else:
            listed = ", ".join(repr(each) for each in sorted(extras, key=str))
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)")


KEYWORDS = {"pattern": pattern, "patternProperties": pattern_properties,
            "additionalProperties": additional_properties}
