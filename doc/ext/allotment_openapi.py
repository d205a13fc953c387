"""``{allotment-openapi}``: allotment's own routes, from its OpenAPI document.

The document is the one the service serves at ``/openapi.json``
(``allotment.openapi.document`` on ``allotment.wsgi.ROUTES``). A route is
allotment's own unless an upstream Placement policy rule (``API_RULES`` entries
with no ``upstream`` bound) guards it, or it is the version document ``/``.
For each operation: summary and description, microversions, the option that
turns it on, the policy rule its handler checks, parameters, request body
fields and responses.
"""

from __future__ import annotations

from typing import Any

from generated_markdown import GeneratedMarkdown, cell, code, table
from sphinx.application import Sphinx

from allotment import openapi, policy, wsgi

VERSION_HEADER = openapi.VERSION_HEADER


def upstream_paths() -> set[str]:
    return {"/"} | {path for rule in policy.API_RULES if rule.upstream is None
                    for _, path in rule.operations}


def _versions(spec: dict[str, Any]) -> str:
    bounds = spec.get("x-microversions")
    return f"{bounds['min']}\N{EN DASH}{bounds['max']}" if bounds else ""


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind:
        return kind
    if "enum" in schema:
        return "one of " + ", ".join(str(value) for value in schema["enum"])
    if "anyOf" in schema or "oneOf" in schema:
        return "see variants"
    return "any"


def _parameters(operation: dict[str, Any]) -> str:
    rows = []
    for param in operation.get("parameters", []):
        if param["name"] == VERSION_HEADER:
            continue
        required = "yes" if param.get("required") else "no"
        if "x-required-microversions" in param:
            required = "at " + _versions({"x-microversions": param["x-required-microversions"]})
        rows.append([code(param["name"]), param["in"], cell(_type(param.get("schema", {}))),
                     required, _versions(param), cell(param.get("description", ""))])
    if not rows:
        return ""
    return table(["Parameter", "In", "Type", "Required", "Microversions", "Description"], rows)


def _body(operation: dict[str, Any]) -> str:
    body = operation.get("requestBody")
    if not body:
        return ""
    schema = body.get("content", {}).get("application/json", {}).get("schema", {})
    rows = []
    for variant in schema.get("anyOf", [schema]):
        required = set(variant.get("required", []))
        for name, field in variant.get("properties", {}).items():
            rows.append([code(name), cell(_type(field)), "yes" if name in required else "no",
                         _versions(variant), cell(field.get("description", ""))])
    if not rows:
        return "Request body: JSON (schema in `/openapi.json`)."
    return "Request body (JSON):\n\n" + table(
        ["Field", "Type", "Required", "Microversions", "Description"], rows)


def _responses(operation: dict[str, Any]) -> str:
    rows = [[code(status), cell(answer.get("description", "")), _versions(answer)]
            for status, answer in operation.get("responses", {}).items()]
    return table(["Status", "Meaning", "Microversions"], rows)


def _operation(method: str, path: str, operation: dict[str, Any], rule: str | None) -> str:
    facts = [f"Microversions: {_versions(operation) or 'all'}."]
    if rule:
        facts.append(f"Policy rule: {code(rule)} (see [the policy rules](policy.md#api-rules)).")
    else:
        facts.append("No token needed.")
    if operation.get("x-requires-option"):
        facts.append(f"Served only with {code(operation['x-requires-option'])} "
                     "(404 without it).")
    parts = [f"### {method.upper()} `{path}`", operation.get("summary", ""),
             " ".join(facts)]
    if operation.get("description"):
        parts.append(operation["description"])
    parts += [_parameters(operation), _body(operation), _responses(operation)]
    return "\n\n".join(part for part in parts if part)


class OwnRoutes(GeneratedMarkdown):
    """A section per own route, an operation per method under it."""

    def markdown(self) -> str:
        rules = {(template, method): op.rule for template, resource in wsgi.ROUTES
                 for method, op in getattr(resource, "operations", {}).items()}
        document = openapi.document(wsgi.ROUTES)
        upstream = upstream_paths()
        parts = []
        for path, operations in document["paths"].items():
            if path in upstream:
                continue
            parts.append(f"## `{path}`")
            parts += [_operation(method, path, operation, rules.get((path, method.upper())))
                      for method, operation in operations.items()]
        return "\n\n".join(parts)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("allotment-openapi", OwnRoutes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
