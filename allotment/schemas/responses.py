"""JSON Schemas of the response bodies, for the OpenAPI document (``allotment.openapi``).

The handlers build their bodies in code; these schemas describe them, and
``tests/test_openapi.py`` checks real answers against them at several
microversions. Where a field or shape belongs to some microversions only, it
carries ``x-microversions`` (``{"min": "1.14", "max": "1.39"}``): inside that
range it is present (required) unless it also says ``x-optional``, outside it
absent. ``allotment.openapi.at_version`` turns a schema into the exact one of
one microversion; without it, a schema holds for every microversion.
"""

from __future__ import annotations

from typing import Any

from allotment.http.microversion import MAX_VERSION

Schema = dict[str, Any]

_LATEST = MAX_VERSION[1]


def versions(first: int, last: int = _LATEST) -> dict[str, str]:
    """The range ``1.first`` to ``1.last``, as the ``x-microversions`` extension writes it."""
    return {"min": f"1.{first}", "max": f"1.{last}"}


def since(first: int, schema: Schema, optional: bool = False) -> Schema:
    """``schema`` from ``1.first`` on (present there, unless ``optional``)."""
    return ranged(first, _LATEST, schema, optional)


def ranged(first: int, last: int, schema: Schema, optional: bool = False) -> Schema:
    marked = {**schema, "x-microversions": versions(first, last)}
    if optional:
        marked["x-optional"] = True
    return marked


def obj(required: dict[str, Schema], optional: dict[str, Schema] | None = None,
        **extra: Any) -> Schema:
    """A closed object: ``required`` fields (those with a version range only in
    their range) and ``optional`` ones."""
    properties = {**required, **(optional or {})}
    always = [name for name, schema in required.items() if "x-microversions" not in schema]
    schema: Schema = {"type": "object", "properties": properties,
                      "additionalProperties": False, **extra}
    if always:
        schema["required"] = always
    return schema


def mapping(values: Schema, keys: Schema | None = None) -> Schema:
    """An object used as a dictionary: any keys (matching ``keys``), ``values``."""
    schema: Schema = {"type": "object", "additionalProperties": values}
    if keys is not None:
        schema["propertyNames"] = keys
    return schema


STRING: Schema = {"type": "string"}
INTEGER: Schema = {"type": "integer"}
UUID: Schema = {"type": "string", "format": "uuid"}
NULLABLE_UUID: Schema = {"type": ["string", "null"], "format": "uuid"}
GENERATION: Schema = {"type": "integer", "minimum": 0}
CLASS_NAME: Schema = {"type": "string", "pattern": "^[A-Z0-9_]+$"}

LINK = obj({"rel": STRING, "href": STRING})
LINKS: Schema = {"type": "array", "items": LINK}

# GET /
ROOT = obj({"versions": {"type": "array", "items": obj({
    "id": STRING,
    "min_version": STRING,
    "max_version": STRING,
    "status": {"type": "string", "enum": ["CURRENT"]},
    "links": LINKS,
})}})

# The Placement error body: every refusal the application makes. ``code``
# from 1.23; the version range only on a 406 refusing the requested version.
ERROR = obj({"errors": {"type": "array", "minItems": 1, "items": obj(
    {
        "status": INTEGER,
        "title": STRING,
        "detail": STRING,
        "code": since(23, {"type": "string", "pattern": "^placement\\.[a-z_.]+$"}),
        "request_id": {"type": "string", "pattern": "^req-[0-9a-f-]{36}$"},
    },
    {"min_version": STRING, "max_version": STRING},
)}})

# keystonemiddleware / WebOb's own 401 (not the Placement error body).
UNAUTHORIZED: Schema = {"type": "object"}

PROVIDER = obj({
    "uuid": UUID,
    "name": STRING,
    "generation": GENERATION,
    "links": LINKS,
    "parent_provider_uuid": since(14, NULLABLE_UUID),
    "root_provider_uuid": since(14, UUID),
})
PROVIDERS = obj({"resource_providers": {"type": "array", "items": PROVIDER}})

_INVENTORY_FIELDS = {
    "total": INTEGER,
    "reserved": INTEGER,
    "min_unit": INTEGER,
    "max_unit": INTEGER,
    "step_size": INTEGER,
    "allocation_ratio": {"type": "number"},
}
INVENTORY_RECORD = obj(_INVENTORY_FIELDS)
# One inventory: the provider generation is left out while it is 0 (as upstream).
INVENTORY = obj(_INVENTORY_FIELDS, {"resource_provider_generation": GENERATION})
INVENTORIES = obj({
    "resource_provider_generation": GENERATION,
    "inventories": mapping(INVENTORY_RECORD, CLASS_NAME),
})

RESOURCE_AMOUNTS = mapping({"type": "integer", "minimum": 0}, CLASS_NAME)

PROVIDER_USAGES = obj({"resource_provider_generation": GENERATION,
                       "usages": RESOURCE_AMOUNTS})

# From 1.38 the project's usages are grouped by consumer type.
USAGES = obj({"usages": {"anyOf": [
    ranged(9, 37, RESOURCE_AMOUNTS),
    since(38, mapping({
        "type": "object",
        "properties": {"consumer_count": {"type": "integer", "minimum": 0}},
        "required": ["consumer_count"],
        "additionalProperties": {"type": "integer", "minimum": 0},
    })),
]}})

TRAITS = obj({"traits": {"type": "array", "items": STRING}})
PROVIDER_TRAITS = obj({"traits": {"type": "array", "items": STRING},
                       "resource_provider_generation": GENERATION})

AGGREGATES = obj({
    "aggregates": {"type": "array", "items": UUID},
    "resource_provider_generation": since(19, GENERATION),
})

RESOURCE_CLASS = obj({"name": CLASS_NAME, "links": LINKS})
RESOURCE_CLASSES = obj({"resource_classes": {"type": "array", "items": RESOURCE_CLASS}})

PROVIDER_ALLOCATIONS = obj({
    "allocations": mapping(obj({
        "resources": RESOURCE_AMOUNTS,
        "consumer_generation": since(28, {"type": ["integer", "null"]}),
    }), UUID),
    "resource_provider_generation": GENERATION,
})

# The consumer's fields appear only when it holds allocations.
CONSUMER_ALLOCATIONS = obj({
    "allocations": mapping(obj({"resources": RESOURCE_AMOUNTS, "generation": GENERATION}),
                           UUID),
    "project_id": since(12, STRING, optional=True),
    "user_id": since(12, STRING, optional=True),
    "consumer_generation": since(28, {"type": ["integer", "null"]}, optional=True),
    "consumer_type": since(38, STRING, optional=True),
})

_CANDIDATE_LIST = {"type": "array", "items": obj({
    "resource_provider": obj({"uuid": UUID}),
    "resources": RESOURCE_AMOUNTS,
})}
_CANDIDATE_DICT = mapping(obj({"resources": RESOURCE_AMOUNTS}), UUID)

ALLOCATION_CANDIDATES = obj({
    "allocation_requests": {"type": "array", "items": obj({
        "allocations": {"anyOf": [ranged(10, 11, _CANDIDATE_LIST),
                                  since(12, _CANDIDATE_DICT)]},
        "mappings": since(34, mapping({"type": "array", "items": UUID})),
    })},
    "provider_summaries": mapping(obj({
        "resources": mapping(obj({"capacity": INTEGER, "used": INTEGER}), CLASS_NAME),
        "traits": since(17, {"type": "array", "items": STRING}),
        "parent_provider_uuid": since(29, NULLABLE_UUID),
        "root_provider_uuid": since(29, UUID),
    }), UUID),
})

# GET /explain/allocation_candidates: the candidates and why trees were left out
# (doc/source/operating/explain.md; open objects: reasons carry the numbers that apply).
_REASON = obj({"group": STRING, "filter": STRING, "detail": STRING},
              {"provider_uuid": {"type": ["string", "null"]},
               "resource_class": {"type": ["string", "null"]}},
              additionalProperties=True)
EXPLANATION = obj({
    "trees": obj({"total": INTEGER, "qualified": INTEGER, "excluded": INTEGER}),
    "steps": {"type": "array", "items": obj(
        {"group": STRING, "filter": STRING, "providers": INTEGER}, {"detail": STRING},
        additionalProperties=True)},
    "reasons": {"type": "array", "items": obj(
        {"group": STRING, "filter": STRING, "trees": INTEGER, "detail": STRING},
        {"resource_class": {"type": ["string", "null"]}}, additionalProperties=True)},
    "excluded": {"type": "array", "items": obj(
        {"root_provider_uuid": UUID, "reasons": {"type": "array", "items": _REASON}},
        {"root_provider_name": {"type": ["string", "null"]}}, additionalProperties=True)},
}, additionalProperties=True)
EXPLAIN_CANDIDATES = {
    **ALLOCATION_CANDIDATES,
    "properties": {**ALLOCATION_CANDIDATES["properties"], "explanation": EXPLANATION},
    "required": [*ALLOCATION_CANDIDATES.get("required", []), "explanation"],
}

# GET /headroom: how many more consumers of a candidates request fit
# (doc/source/operating/headroom.md).
_COUNTED: Schema = {"type": "integer", "minimum": 0}
HEADROOM = obj({
    "total": {**_COUNTED, "description": "Consumers that fit in all, added hosts included."},
    "optimal": {"type": "boolean",
                "description": "True when the total is the most that can fit; otherwise "
                               "it is a greedy packing's (at least that many fit)."},
    "roots": {"type": "array", "items": obj({"uuid": UUID, "name": {"type": ["string", "null"]},
                                             "count": _COUNTED}),
              "description": "Root providers that take at least one, most first "
                             "(limit: the first ones only)."},
}, {
    "aggregates": mapping(_COUNTED, UUID),
    "excluded_roots": {"type": "array", "items": UUID},
    "added": {"type": "array", "items": obj({"template": STRING, "hosts": _COUNTED,
                                             "each": _COUNTED, "total": _COUNTED})},
    "capped": _COUNTED,
})

# GET /openapi.json: an OpenAPI document (checked against the 3.1 meta-schema in tests).
OPENAPI: Schema = {"type": "object", "required": ["openapi", "info", "paths"]}

# --- allotment's own: the dashboard's data (GET /dashboard/api/...) ---------------
# Only with ``[allotment] dashboard = True`` (doc/source/operating/dashboard.md); not Placement's.
# Built in ``allotment.ledger.overview``; no microversion changes them.

_COUNT: Schema = {"type": "integer", "minimum": 0}
_PAGE = {"total": _COUNT, "limit": _COUNT, "offset": _COUNT}

# One provider of a tree, with its first children (each one the same shape):
# a recursive schema, so a component of the document that refers to itself.
DASHBOARD_NODE_NAME = "DashboardProvider"
DASHBOARD_NODE_REF: Schema = {"$ref": f"#/components/schemas/{DASHBOARD_NODE_NAME}"}
DASHBOARD_NODE = obj({
    "uuid": UUID,
    "name": STRING,
    "generation": GENERATION,
    "parent_provider_uuid": NULLABLE_UUID,
    "root_provider_uuid": UUID,
    "inventories": mapping(obj({**_INVENTORY_FIELDS, "capacity": INTEGER, "used": _COUNT}),
                           CLASS_NAME),
    "traits": {"type": "array", "items": STRING},
    "aggregates": {"type": "array", "items": UUID},
    "child_count": _COUNT,
    "children": {"type": "array", "items": DASHBOARD_NODE_REF,
                 "description": "The first children by name (child_count says how many "
                                "there are; .../children pages on)."},
})
# The schemas the document's ``components`` holds (referred to by ``$ref``).
COMPONENTS: dict[str, Schema] = {DASHBOARD_NODE_NAME: DASHBOARD_NODE}

DASHBOARD_PROVIDERS = obj({**_PAGE, "trees": {"type": "array", "items": DASHBOARD_NODE_REF}})
DASHBOARD_CHILDREN = obj({**_PAGE,
                          "children": {"type": "array", "items": DASHBOARD_NODE_REF}})

_RANKED = obj({
    "uuid": UUID,
    "name": STRING,
    "root_provider_uuid": UUID,
    "root_provider_name": STRING,
    "fullness": {"type": "number", "minimum": 0},
    "resource_class": CLASS_NAME,
    "used": _COUNT,
    "capacity": INTEGER,
})
DASHBOARD_SUMMARY = obj({
    "providers": _COUNT,
    "trees": _COUNT,
    "consumers": _COUNT,
    "totals": mapping(obj({"total": INTEGER, "reserved": INTEGER, "capacity": INTEGER,
                           "used": _COUNT, "providers": _COUNT}), CLASS_NAME),
    "fullest": {"type": "array", "items": _RANKED},
    "emptiest": {"type": "array", "items": _RANKED},
})
DASHBOARD_PROJECTS = obj({**_PAGE, "projects": {"type": "array", "items": obj({
    "project_id": STRING,
    "consumer_count": _COUNT,
    "usages": RESOURCE_AMOUNTS,
})}})
# Per consumer type: GET /usages's 1.38 shape, for the whole cloud.
DASHBOARD_CONSUMER_TYPES = obj({"consumer_types": mapping({
    "type": "object",
    "properties": {"consumer_count": _COUNT},
    "required": ["consumer_count"],
    "additionalProperties": _COUNT,
})})
# The consumer's fields only when it holds allocations.
DASHBOARD_CONSUMER = obj(
    {"consumer_uuid": STRING,
     "allocations": mapping(obj({
         "name": STRING,
         "root_provider_uuid": UUID,
         "root_provider_name": STRING,
         "generation": GENERATION,
         "resources": RESOURCE_AMOUNTS,
     }), UUID)},
    {"consumer_generation": GENERATION,
     "project_id": STRING,
     "user_id": STRING,
     "consumer_type": STRING},
)
# Providers that no longer exist are left out.
DASHBOARD_PROVIDER_NAMES = obj({"providers": mapping(obj({
    "name": STRING,
    "root_provider_uuid": UUID,
    "root_provider_name": STRING,
}), UUID)})

# --- allotment's own: history entries and the audit (GET /audit/allocations) ------
# Rendered by ``allotment.http.history_render``; no microversion changes them.

_TIME: Schema = {"type": "string", "format": "date-time",
                 "description": "ISO 8601, UTC, e.g. 2026-12-03T18:42:19.157342Z."}
_NULLABLE_STRING: Schema = {"type": ["string", "null"]}
_NULLABLE_INTEGER: Schema = {"type": ["integer", "null"]}
_NULLABLE_NUMBER: Schema = {"type": ["number", "null"]}
_NULLABLE_TIME: Schema = {"type": ["string", "null"], "format": "date-time"}
_WRITER: Schema = {"type": "string", "enum": ["allotment", "outside"],
                   "description": "allotment (with the request's ids), or any other "
                                  "writer: upstream Placement, an operator's SQL."}

# One (consumer, provider, class) as one transaction changed it.
HISTORY_ALLOCATION_ENTRY = obj({
    "id": INTEGER,
    "at": _TIME,
    "consumer_uuid": STRING,
    "consumer_type": _NULLABLE_STRING,
    "project_id": _NULLABLE_STRING,
    "user_id": _NULLABLE_STRING,
    "resource_provider_uuid": _NULLABLE_STRING,
    "resource_class": _NULLABLE_STRING,
    "used_before": INTEGER,
    "used_after": INTEGER,
    "request_id": _NULLABLE_STRING,
    "global_request_id": _NULLABLE_STRING,
    "writer": _WRITER,
})
# One (provider, class) inventory as one transaction changed it; "before" null:
# created, "after" null: deleted.
HISTORY_INVENTORY_ENTRY = obj({
    "id": INTEGER,
    "at": _TIME,
    "resource_provider_uuid": _NULLABLE_STRING,
    "resource_provider_generation": _NULLABLE_INTEGER,
    "resource_class": _NULLABLE_STRING,
    "total_before": _NULLABLE_INTEGER,
    "total_after": _NULLABLE_INTEGER,
    "reserved_before": _NULLABLE_INTEGER,
    "reserved_after": _NULLABLE_INTEGER,
    "allocation_ratio_before": _NULLABLE_NUMBER,
    "allocation_ratio_after": _NULLABLE_NUMBER,
    "min_unit": _NULLABLE_INTEGER,
    "max_unit": _NULLABLE_INTEGER,
    "step_size": _NULLABLE_INTEGER,
    "request_id": _NULLABLE_STRING,
    "global_request_id": _NULLABLE_STRING,
    "writer": _WRITER,
})
# GET /history/allocations and /history/inventories.
HISTORY_ALLOCATIONS = obj({"entries": {"type": "array", "items": HISTORY_ALLOCATION_ENTRY},
                           "next_marker": _NULLABLE_INTEGER})
HISTORY_INVENTORIES = obj({"entries": {"type": "array", "items": HISTORY_INVENTORY_ENTRY},
                           "next_marker": _NULLABLE_INTEGER})

_STRINGS: Schema = {"type": "array", "items": STRING}
_CONSUMER_EVIDENCE = {
    "consumer_uuid": STRING,
    "project_id": _NULLABLE_STRING,
    "user_id": _NULLABLE_STRING,
    "consumer_type": _NULLABLE_STRING,
    "generation": INTEGER,
    "created_at": _NULLABLE_TIME,
    "updated_at": _NULLABLE_TIME,
}
# Each kind's evidence (``allotment.ledger.audit``).
AUDIT_EVIDENCE: dict[str, Schema] = {
    "over_capacity": obj({
        "resource_provider_name": _NULLABLE_STRING, "used": INTEGER, "total": INTEGER,
        "reserved": INTEGER, "allocation_ratio": {"type": "number"}, "capacity": INTEGER}),
    "empty_consumer": obj(_CONSUMER_EVIDENCE),
    "old_migration": obj({
        **_CONSUMER_EVIDENCE,
        "reasons": _STRINGS,
        "roots": {**_STRINGS, "description": "The root providers of the providers it "
                                             "holds allocations on (sharing ones left out)."},
        "sharing_providers": _STRINGS,
        "age_seconds": INTEGER}),
    "allocation_without_inventory": obj({
        "resource_provider_uuid": _NULLABLE_STRING,
        "resource_provider_name": _NULLABLE_STRING,
        "resource_class": _NULLABLE_STRING,
        "used": INTEGER,
        "consumer_count": _COUNT,
        "consumers": {"type": "array", "items": obj({"consumer_uuid": STRING,
                                                     "used": INTEGER}),
                      "description": "The first 20 consumers by uuid."}}),
    "incomplete_consumer": obj({
        **_CONSUMER_EVIDENCE,
        "placeholder": {"type": "array", "items": {"enum": ["project", "user"]}}}),
}


def _finding(kind: str, evidence: Schema) -> Schema:
    return obj({
        "kind": {"const": kind},
        "summary": STRING,
        "consumer_uuid": _NULLABLE_STRING,
        "resource_provider_uuid": _NULLABLE_STRING,
        "resource_class": _NULLABLE_STRING,
        "evidence": evidence,
        "history": obj({
            "allocations": {"type": "array", "items": HISTORY_ALLOCATION_ENTRY},
            "inventories": {"type": "array", "items": HISTORY_INVENTORY_ENTRY}}),
    })


AUDIT = obj({
    "generated_at": _TIME,
    "settings": obj({"migration_age": _COUNT, "incomplete_consumer_project_id": STRING,
                     "incomplete_consumer_user_id": STRING}),
    "counts": obj({kind: _COUNT for kind in AUDIT_EVIDENCE}),
    "findings": {"type": "array",
                 "items": {"oneOf": [_finding(kind, evidence)
                                     for kind, evidence in AUDIT_EVIDENCE.items()]}},
})
