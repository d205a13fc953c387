"""The OpenAPI 3.1 description of the API, built from the code that serves it.

``document()`` is a pure function of the route table (``allotment.wsgi.ROUTES``,
passed in) and the microversion facts (``allotment.http.microversion.GATES``).
Each route's handler class carries its ``operations``
(``allotment.http.operations``): per method, the schemas the handler
validates the body and query string with (``allotment.schemas.*``), asked
for here at every microversion, and the answers it gives (response bodies
from ``allotment.schemas.responses``).

Microversions appear as the extension ``x-microversions: {"min", "max"}`` on
an operation, a parameter, a request-body variant, a response or a field.
Where a request body's schema changes with the version, the body is an
``anyOf`` of one variant per range of versions with the same schema (not
``oneOf``: a body of one version is often valid at a later one too).
``at_version`` specializes a document or schema to one microversion.

allotment's own routes (the dashboard's data, ``/dashboard/api/...``) are
described too, each marked so in its summary and description; a route there
only with a configuration option carries ``x-requires-option`` (it answers
404 without it). A recursive response schema (a provider tree) is a
``components.schemas`` entry (``responses.COMPONENTS``) that ``$ref``s itself.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterable
from typing import Any

from allotment import errors
from allotment.http.microversion import GATES, MAX_VERSION, MIN_VERSION, Version
from allotment.http.operations import Described, Operation, Schema
from allotment.schemas import responses as r

VERSIONS = [Version(MIN_VERSION[0], minor) for minor in range(MIN_VERSION[1], MAX_VERSION[1] + 1)]
VERSION_HEADER = "OpenStack-API-Version"
PATH = "/openapi.json"

# The URIs that need no token (see allotment.auth).
UNAUTHENTICATED = ("/", PATH)


# Answers any operation may give: a malformed microversion (400), one out of
# range or an Accept without JSON (406), a long query string (414), the
# database out of reach (503); with a body, a large one (413) or another media
# type than JSON (415). Policy refusals (403) and missing tokens (401) where a
# token is needed.
_COMMON = (400, 406, 414, 503)
_WITH_BODY = (413, 415)


def _first_minor(op: Operation) -> int:
    return GATES[op.since][1] if op.since else MIN_VERSION[1]


def _range(first: int, last: int = MAX_VERSION[1]) -> dict[str, str]:
    return r.versions(first, last)


def _runs(versions: Iterable[Version], value_at: Callable[[Version], Any]
          ) -> list[tuple[int, int, Any]]:
    """Consecutive versions with an equal value: (first minor, last minor, value)."""
    runs: list[tuple[int, int, Any]] = []
    for version in versions:
        value = value_at(version)
        if runs and runs[-1][2] == value:
            runs[-1] = (runs[-1][0], version.minor, value)
        else:
            runs.append((version.minor, version.minor, value))
    return runs


def _request_body(op: Operation, body: Callable[[Version], Schema | None]) -> Schema:
    live = [v for v in VERSIONS if v.minor >= _first_minor(op)]
    runs = [run for run in _runs(live, body) if run[2] is not None]
    variants = [{**copy.deepcopy(schema), "x-microversions": _range(first, last)}
                for first, last, schema in runs]
    schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
    with_body = {v.minor for v in live if body(v) is not None}
    spec: Schema = {"content": {"application/json": {"schema": schema}},
                    "required": len(with_body) == len(live)}
    if len(with_body) != len(live):
        spec["description"] = "Only at the versions its variants name; none at the others."
    return spec


_PATTERN_NAME = re.compile(r"^\^([a-z_]+)\(")


def _query_parameters(op: Operation, query: Callable[[Version], Schema]) -> list[Schema]:
    """One parameter per query-string key the handler's schema knows, with its versions."""
    seen: dict[str, dict[str, Any]] = {}
    for version in VERSIONS:
        if version.minor < _first_minor(op):
            continue
        schema = query(version)
        keys = [(name, prop, None) for name, prop in schema.get("properties", {}).items()]
        keys += [(found.group(1), prop, pattern)
                 for pattern, prop in schema.get("patternProperties", {}).items()
                 if (found := _PATTERN_NAME.match(pattern))]
        for name, prop, pattern in keys:
            entry = seen.setdefault(name, {"first": version.minor, "schema": prop,
                                           "patterns": {}, "required": set()})
            entry["last"] = version.minor
            entry["schema"] = prop
            if pattern:
                patterns = entry["patterns"]
                patterns.setdefault(pattern, [version.minor, version.minor])[1] = version.minor
            if name in schema.get("required", ()):
                entry["required"].add(version.minor)
    params = []
    for name, entry in seen.items():
        first, last = entry["first"], entry["last"]
        param: Schema = {"name": name, "in": "query", "schema": copy.deepcopy(entry["schema"]),
                         "x-microversions": _range(first, last)}
        if entry["required"]:
            required = sorted(entry["required"])
            if required == list(range(first, last + 1)):
                param["required"] = True
            else:
                param["x-required-microversions"] = _range(required[0], required[-1])
        if entry["patterns"]:
            # Granular request groups: the key may carry a suffix matching the pattern.
            param["x-key-patterns"] = [{"pattern": pattern, "x-microversions": _range(a, b)}
                                       for pattern, (a, b) in entry["patterns"].items()]
            param["description"] = ("Also accepted with a request-group suffix "
                                     "(see x-key-patterns).")
        params.append(param)
    return params


def _error_response(status: int, description: str | None = None) -> Schema:
    if status == 401:
        return {"description": "No token, or an invalid one (WebOb's body, not Placement's)",
                "content": {"application/json": {"schema": r.UNAUTHORIZED}}}
    return {"description": description or errors.TITLES[status], "headers": _HEADERS,
            "content": {"application/json": {"schema": r.ERROR}}}


_HEADERS = {
    VERSION_HEADER: {"description": "The microversion that served the request, "
                                    "e.g. `placement 1.39`.",
                     "schema": {"type": "string", "pattern": "^placement 1\\.[0-9]+$"}},
    "x-openstack-request-id": {"schema": {"type": "string"}},
}
_LOCATION = {"Location": {"description": "The new resource's URL.",
                          "schema": {"type": "string"}}}


def _responses(op: Operation, template: str, authenticated: bool,
               has_body: bool) -> Schema:
    answers: Schema = {}
    for answer in op.answers:
        response: Schema = {"description": answer.description,
                            "headers": {**_HEADERS, **(_LOCATION if answer.location else {})}}
        if answer.schema is not None:
            response["content"] = {"application/json": {"schema": answer.schema}}
        if (answer.first, answer.last) != (MIN_VERSION[1], MAX_VERSION[1]):
            response["x-microversions"] = _range(answer.first, answer.last)
        answers[str(answer.status)] = response
    statuses = set(_COMMON) | set(op.refusals)
    if has_body:
        statuses |= set(_WITH_BODY)
    if authenticated:
        statuses |= {401, 403}
    first = _first_minor(op)
    descriptions: dict[int, str] = {}
    if "{" in template:
        statuses.add(404)
    if op.requires_option:
        statuses.add(404)
        descriptions[404] = (f"{errors.TITLES[404]} (also: `{op.requires_option}` is off, "
                             "as for any unknown path)")
    if first > MIN_VERSION[1]:
        gate = 405 if op.gated_by_method else 404
        statuses.add(gate)
        descriptions[gate] = (f"{errors.TITLES[gate]} (also: asked at a microversion before "
                              f"1.{first})")
    for status in sorted(statuses):
        answers.setdefault(str(status), _error_response(status, descriptions.get(status)))
    return answers


def _version_parameter() -> Schema:
    return {
        "name": VERSION_HEADER, "in": "header", "required": False,
        "description": "The microversion, `placement 1.N` or `placement latest`; "
                       "1.0 when absent.",
        "schema": {"type": "string",
                   "enum": [f"placement {v}" for v in VERSIONS] + ["placement latest"]},
    }


def _operation(template: str, method: str, op: Operation) -> Schema:
    authenticated = template not in UNAUTHENTICATED
    words = re.sub(r"[^a-z_]", "", template.replace("/", "_")) or "_root"
    spec: Schema = {
        "operationId": method.lower() + words,
        "summary": op.summary,
        "x-microversions": _range(_first_minor(op)),
        "parameters": [_version_parameter()],
    }
    if op.since:
        spec["x-microversion-fact"] = op.since
    if op.description:
        spec["description"] = op.description
    if op.requires_option:
        spec["x-requires-option"] = op.requires_option
    for name, schema in op.path_params.items():
        spec["parameters"].append({"name": name, "in": "path", "required": True,
                                   "schema": schema})
    if op.query is not None:
        spec["parameters"] += _query_parameters(op, op.query)
    if op.body is not None:
        spec["requestBody"] = _request_body(op, op.body)
    spec["responses"] = _responses(op, template, authenticated, op.body is not None)
    if not authenticated:
        spec["security"] = []
    return spec


_METHODS = ("GET", "PUT", "POST", "DELETE", "PATCH")


def _undescribed(template: str, method: str) -> Schema:
    """A route whose class does not describe the method: listed, its answers left open."""
    return {"operationId": method.lower() + re.sub(r"[^a-z_]", "", template.replace("/", "_")),
            "summary": "Not described yet", "x-undescribed": True,
            "parameters": [{"name": name, "in": "path", "required": True,
                            "schema": {"type": "string"}}
                           for name in re.findall(r"{(\w+)}", template)],
            "responses": {"default": {"description": "Not described yet"}}}


def document(routes: Iterable[tuple[str, type[Described]]]) -> Schema:
    """The OpenAPI 3.1 document for ``routes`` (URI template, resource class).

    Each method a route's class has (``on_get``, ...) is an operation; one
    that the class's ``operations`` does not describe is listed with
    ``x-undescribed``.
    """
    paths: Schema = {}
    for template, resource in routes:
        for method in _METHODS:
            if not hasattr(resource, "on_" + method.lower()):
                continue
            op = resource.operations.get(method)
            paths.setdefault(template, {})[method.lower()] = (
                _operation(template, method, op) if op else _undescribed(template, method))
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "allotment: OpenStack Placement API",
            "version": f"{MIN_VERSION[0]}.{MIN_VERSION[1]}-{MAX_VERSION[0]}.{MAX_VERSION[1]}",
            "description": "Generated from allotment's route table, microversion facts and "
                           "JSON Schemas. `x-microversions` gives the range of microversions "
                           "an operation, parameter, body variant, response or field belongs "
                           "to; see doc/source/operating/openapi.md.",
        },
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "components": {
            "securitySchemes": {"token": {
                "type": "apiKey", "in": "header", "name": "X-Auth-Token",
                "description": "A Keystone token (noauth2: the user name, `admin` for an "
                               "admin)."}},
            "schemas": copy.deepcopy(r.COMPONENTS),
        },
        "security": [{"token": []}],
        "paths": paths,
    }


# -- One microversion -------------------------------------------------------

def _in_range(spec: Any, version: Version) -> bool:
    if not isinstance(spec, dict) or "x-microversions" not in spec:
        return True
    bounds = spec["x-microversions"]
    low = tuple(int(x) for x in bounds["min"].split("."))
    high = tuple(int(x) for x in bounds["max"].split("."))
    return low <= (version.major, version.minor) <= high


def at_version(schema: Any, version: Version) -> Any:
    """``schema`` as it holds at ``version`` (None if it is not there at all).

    Parts out of range are dropped (a closed object then refuses their
    fields), versioned fields in range become required unless ``x-optional``,
    and an ``anyOf``/``oneOf`` left with one variant is replaced by it.
    """
    if isinstance(schema, list):
        return [at_version(item, version) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if not _in_range(schema, version):
        return None
    out: Schema = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            props = {}
            required = list(schema.get("required", []))
            for name, prop in value.items():
                if not _in_range(prop, version):
                    continue
                props[name] = at_version(prop, version)
                if (isinstance(prop, dict) and "x-microversions" in prop
                        and not prop.get("x-optional") and name not in required):
                    required.append(name)
            out["properties"] = props
            if required:
                out["required"] = required
        elif key == "required" and "properties" in schema:
            out.setdefault("required", value)
        elif key in ("anyOf", "oneOf") and isinstance(value, list):
            variants = [at_version(v, version) for v in value if _in_range(v, version)]
            if not variants:
                return None  # Every variant belongs to other versions.
            if len(variants) == 1:
                out.update({k: v for k, v in variants[0].items() if k not in out})
            else:
                out[key] = variants
        elif isinstance(value, (dict, list)):
            out[key] = at_version(value, version)
        else:
            out[key] = value
    return out


def document_at(doc: Schema, version: Version) -> Schema:
    """``doc`` for clients of one microversion: operations, parameters, bodies and
    answers of that version only. The version header is left out of the
    operations (``info.x-microversion`` names the version to send in it)."""
    paths: Schema = {}
    for template, methods in doc["paths"].items():
        for method, spec in methods.items():
            if not _in_range(spec, version):
                continue
            spec = at_version(spec, version)
            # The version is the document's: a client sends it with every request.
            spec["parameters"] = [p for p in spec["parameters"]
                                  if p is not None and p["name"] != VERSION_HEADER]
            for param in spec["parameters"]:
                if "x-required-microversions" in param:
                    wanted = {"x-microversions": param["x-required-microversions"]}
                    param["required"] = _in_range(wanted, version)
            if spec.get("requestBody") is not None:
                body = spec["requestBody"]["content"]["application/json"]
                if body["schema"] is None:
                    del spec["requestBody"]
                else:
                    spec["requestBody"]["required"] = True
            spec["responses"] = {status: answer for status, answer in spec["responses"].items()
                                 if answer is not None}
            paths.setdefault(template, {})[method] = spec
    return {**doc, "info": {**doc["info"], "x-microversion": str(version)}, "paths": paths}
