"""Fuzzing every described operation with schemathesis, in-process, on each backend.

The document served at /openapi.json is specialized to a few microversions
(``allotment.openapi.document_at``); schemathesis generates valid and invalid
requests from each view and sends them through the WSGI app, on a database
seeded with a provider tree, inventories, traits, aggregates, a custom class
and allocations. Path parameters name those things (or one unknown name);
a third of the valid requests use chosen query values and body fields too
(``fuzz_view``, ``steer``), so that they get past "not found" and stale
generations.

Every answer must: not be a 5xx; come within ``REQUEST_TIMEOUT``; have a
status, content type, headers and body the view describes; refuse invalid
data with a 4xx; and, when it is a 4xx, leave every table as it was (a
fingerprint of all rows, taken before and after: ``data_unchanged_after_refusal``).
Generation is derandomized and bounded (``MAX_EXAMPLES`` per operation and
mode) and done once for all backends, so a run is repeatable and the three
backends together take about 90 s.

Schemathesis never makes the values that break databases and arithmetic, so
``test_hostile_values`` sends them on purpose (``tests/support/hostile_values.py``):
NaN, the infinities and floats past float32 and float64 (as raw JSON tokens);
integers past 32 and 64 bits; NUL and lone surrogates (as JSON escapes, and as
``%00`` and ``%ED%A0%80`` in paths and queries); a newline after a valid path or
query value (``%0A``). Each goes, one request at a
time, into each field of each request body the document describes (from a valid
base request per body schema, ``BASES``), each query parameter (and the numbered
groups of /allocation_candidates) and each path parameter (``hostile_probes``).
The answer must be a 4xx the document describes that changes nothing, or a 2xx
the document describes for a value it describes as valid; never a 5xx (reported
with the exception the app logged). After a write that stores something the seed
has not, every read that uses it is sent too (``reads_of``): a value may be valid
alone and break a later read. Then the seed is put back. The requests are the same
every run; the three backends together take about 60 s more.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, TypeVar
from urllib.parse import quote, unquote, unquote_to_bytes

import falcon.testing
import hypothesis
import pytest
import requests
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import openapi as schemathesis_openapi
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.core.transport import Response
from schemathesis.specs.openapi import checks as conformance

from allotment import openapi
from allotment.db import tables as t
from allotment.http.microversion import MAX, Version
from allotment.schemas.common import RC_PATTERN, UUID_PATTERN
from allotment.wsgi import ROUTES
from tests.conftest import make_conf
from tests.support.hostile_values import (
    CHARACTERS,
    FIELD_VALUES,
    PERCENT,
    SLOT_VALUES,
    TRAILING,
    TRAILING_PERCENT,
    ConsumerGeneration,
    Fresh,
    Generation,
    Leaf,
    described,
    insert,
    leaves,
    put,
    refused_by,
    resolve,
    server_error,
    to_json,
)

MINORS = (0, 14, 28, 39)
# Cases per operation and mode: more where a body or query string can be wrong.
MAX_EXAMPLES = {"with_input": 8, "path_only": 3}
REQUEST_TIMEOUT = 10.0

T = TypeVar("T")


def call_within(call: Callable[[], T]) -> T | None:
    """``call()``'s answer, or None after ``REQUEST_TIMEOUT`` (its daemon thread is
    left behind, so that a hang fails the test instead of stopping it)."""
    answers: queue.Queue = queue.Queue()

    def run() -> None:
        try:
            answers.put(call())
        except BaseException as exc:  # handed to the test's thread
            answers.put(exc)

    threading.Thread(target=run, daemon=True).start()
    try:
        answer = answers.get(timeout=REQUEST_TIMEOUT)
    except queue.Empty:
        return None
    if isinstance(answer, BaseException):
        raise answer
    return answer
HEADERS = {"X-Auth-Token": "admin", "X-Roles": "admin,service"}

RP = "0f0e0d0c-0b0a-4909-8807-060504030201"
CHILD = "0f0e0d0c-0b0a-4909-8807-060504030202"
CONSUMER = "0f0e0d0c-0b0a-4909-8807-060504030203"
AGG = "0f0e0d0c-0b0a-4909-8807-060504030204"
# What the path parameters draw from (and a name of nothing).
UNKNOWN = "0f0e0d0c-0b0a-4909-8807-0605040302ff"
KNOWN = {
    "uuid": [RP, CHILD],
    "consumer_uuid": [CONSUMER],
    "resource_class": ["VCPU", "DISK_GB", "CUSTOM_GPU"],
    "name": ["CUSTOM_GPU", "CUSTOM_FAST", "VCPU", "HW_CPU_X86_AVX2"],
}
# Query values worth trying (in valid cases of the steered view).
QUERY_VALUES = {
    "resources": ["VCPU:1", "VCPU:1,DISK_GB:10", "CUSTOM_GPU:1", "VCPU:0", "VCPU:-1",
                  "VCPU:1,VCPU:2", "VCPU", ":", "VCPU:", "vcpu:1", "NOPE:1", ""],
    "required": ["CUSTOM_FAST", "!CUSTOM_FAST", "in:CUSTOM_FAST,HW_CPU_X86_AVX2", "in:",
                 "!", ",", "CUSTOM_FAST,!CUSTOM_FAST", "!in:CUSTOM_FAST", "NOPE"],
    "member_of": [AGG, f"in:{AGG}", f"!{AGG}", f"!in:{AGG}", "in:", "!", f"{AGG},", "x"],
    "in_tree": [RP, CHILD, "x", ""],
    "root_required": ["CUSTOM_FAST", "!CUSTOM_FAST", "CUSTOM_FAST,!CUSTOM_FAST", "in:A"],
    "same_subtree": ["_A,_B", "_A", ",", ""],
    "group_policy": ["none", "isolate"],
    "limit": ["1", "0", "-1", "x"],
    "name": ["cn", "in:CUSTOM_FAST,VCPU", "startswith:CUSTOM", "startswith:", "other:x", "x"],
    "uuid": [RP, CHILD],
    "associated": ["true", "false", "TRUE", "x"],
    "project_id": ["proj", ""],
    "user_id": ["user", ""],
    "consumer_type": ["INSTANCE", "all", "unknown", "x"],
    # The dashboard's.
    "offset": ["0", "1", "x"],
    "q": ["cn", "NUMA", RP, "%", "_", ""],
    "roots": [RP, f"{RP},{CHILD}", CHILD, ",", ""],
    "resource_class": ["VCPU", "DISK_GB", "NOPE", ""],
    "uuids": [RP, f"{RP},{CHILD}", f"{CHILD.upper()}, {RP}", ",", ""],
    # The audit's.
    "kind": ["over_capacity", "empty_consumer,incomplete_consumer", "nope", ""],
}
# Names in bodies that refer to seeded things.
BODY_VALUES = {
    "uuid": [RP, CHILD], "parent_provider_uuid": [RP, CHILD, None],
    "resource_provider_generation": [0, 1, 2, 3, 4], "generation": [0, 1, 2, 3],
    "consumer_generation": [None, 0, 1, 2], "resource_class": ["VCPU", "CUSTOM_GPU"],
    "name": ["cn", "numa", "CUSTOM_GPU"], "project_id": ["proj"], "user_id": ["user"],
    "consumer_type": ["INSTANCE", "MIGRATION"],
}
AMOUNTS = [1, 2, 8]
# Keys of dictionaries (matched by pattern) worth trying.
PATTERN_KEYS = {
    UUID_PATTERN: [RP, CHILD, CONSUMER],
    RC_PATTERN: ["VCPU", "DISK_GB", "MEMORY_MB", "CUSTOM_GPU"],
}
CHECKS = [not_a_server_error, conformance.status_code_conformance,
          conformance.content_type_conformance, conformance.response_headers_conformance,
          conformance.response_schema_conformance, conformance.negative_data_rejection]
# What an answer to a hostile request is checked with (a 5xx is reported with the
# server's exception instead).
CONFORMANCE = CHECKS[1:-1]


@pytest.fixture
def conf(database):
    """The dashboard on: its data routes are fuzzed too."""
    return make_conf(database.url, allotment__dashboard=True)


def seed(client) -> None:
    """A provider with a child, inventories, a trait, an aggregate, a class, a consumer."""
    client.create_provider("cn", uuid=RP)
    client.create_provider("numa", uuid=CHILD, parent=RP)
    for path, body in (
        (f"/resource_providers/{RP}/inventories",
         {"resource_provider_generation": 0,
          "inventories": {"VCPU": {"total": 32}, "MEMORY_MB": {"total": 65536},
                          "DISK_GB": {"total": 1000}}}),
        ("/resource_classes/CUSTOM_GPU", None),
        ("/traits/CUSTOM_FAST", None),
        (f"/resource_providers/{RP}/traits",
         {"traits": ["CUSTOM_FAST"], "resource_provider_generation": 1}),
        (f"/resource_providers/{RP}/aggregates",
         {"aggregates": [AGG], "resource_provider_generation": 2}),
        (f"/allocations/{CONSUMER}",
         {"allocations": {RP: {"resources": {"VCPU": 2, "DISK_GB": 10}}},
          "project_id": "proj", "user_id": "user", "consumer_generation": None,
          "consumer_type": "INSTANCE"}),
    ):
        resp = client.put(path, body, version="1.39")
        assert resp.status in (200, 201, 204), (path, resp)


@functools.cache
def _every_row() -> sa.CompoundSelect:
    """One statement for every row of every table, as text."""
    rows = []
    for table in t.metadata.sorted_tables:
        text: Any = sa.literal(table.name, sa.String)
        for column in table.columns:
            text = text + "|" + sa.func.coalesce(sa.cast(column, sa.String), "~")
        rows.append(sa.select(text))
    return sa.union_all(*rows)


def fingerprint(engine: sa.Engine) -> str:
    """A digest of every row of every table."""
    with engine.connect() as conn:
        found = conn.execute(_every_row()).scalars().all()
    digest = hashlib.sha256()
    for row in sorted(found):
        digest.update(row.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def fuzz_view(document: dict, minor: int, steered: bool = False) -> dict:
    """The document at ``1.minor`` as the fuzzer uses it.

    Path parameters take the seeded names or one unknown name (random ones
    would only ever find nothing). ``steered``:
    query parameters and body fields too take only chosen values
    (``QUERY_VALUES``, ``BODY_VALUES``), and dictionaries keyed by uuid or class
    name the seeded keys, so that valid requests reach past the 404s and
    generation conflicts. The token is sent by the test, not generated.
    """
    view = openapi.document_at(document, Version(1, minor))
    view.pop("security", None)
    paths = {}
    for path, methods in view["paths"].items():
        for spec in methods.values():
            for param in spec["parameters"]:
                if param["in"] == "path":
                    param["schema"] = {"type": "string",
                                       "enum": KNOWN[param["name"]] + [UNKNOWN]}
                elif (steered and param["in"] == "query"
                      and param["name"] in QUERY_VALUES):
                    param["schema"] = {"type": "string", "enum": QUERY_VALUES[param["name"]]}
            body = spec.get("requestBody", {}).get("content", {}).get("application/json")
            if body and steered:
                body["schema"] = steer(body["schema"])
        paths[path] = methods
    return {**view, "paths": paths}


def steer(schema: Any) -> Any:
    """``schema`` narrowed to chosen values (it accepts nothing it did not)."""
    if isinstance(schema, list):
        return [steer(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    steered = {key: steer(value) for key, value in schema.items()}
    if "properties" in schema:
        steered["properties"] = {
            name: {"enum": BODY_VALUES[name]} if name in BODY_VALUES else steer(prop)
            for name, prop in schema["properties"].items()}
    for pattern, keys in PATTERN_KEYS.items():
        value = schema.get("patternProperties", {}).get(pattern)
        if value is None:
            continue
        if value.get("type") == "integer":  # an amount of a class
            value = {"enum": AMOUNTS}
        named = steered.setdefault("properties", {})
        for key in keys:
            named.setdefault(key, steer(value))
        # Only those keys (a random one would be a provider or class not found).
        steered["propertyNames"] = {"enum": keys}
    return steered


class Fuzzer:
    def __init__(self, app, engine: sa.Engine) -> None:
        self.app = app
        self.engine = engine
        self.requests = 0
        self.failures: dict[tuple[str, str], str] = {}
        self._known: str | None = None  # the fingerprint, while no write succeeded since
        self._before: str | None = None  # the fingerprint before the request being checked

    def data_unchanged_after_refusal(self, ctx, response, case) -> None:
        """The custom check: a 4xx leaves every row as it was (a 2xx write may not)."""
        status = response.status_code
        if not 400 <= status < 500:
            if case.method.upper() != "GET":
                self._known = None  # a write went through: the data may have changed
            return
        before = self._before
        after = fingerprint(self.engine)
        self._known = after
        if before is not None and after != before:
            raise AssertionError(f"{case.operation.label} answered {status} but changed "
                                 "the data")

    def send(self, case, minor: int) -> None:
        label = case.operation.label
        self._before = None
        if case.method.upper() != "GET":
            if self._known is None:
                self._known = fingerprint(self.engine)
            self._before = self._known
        headers = {**HEADERS, openapi.VERSION_HEADER: f"placement 1.{minor}"}
        self.requests += 1
        response = self._call(case, headers)
        if response is None:
            self._record(label, "hang", f"no answer within {REQUEST_TIMEOUT} s: "
                         f"{case.as_curl_command(headers=headers)}")
            raise AssertionError(f"{label} hangs: {dict(self.failures)}")
        try:
            case.validate_response(response, checks=CHECKS, headers=headers,
                                   additional_checks=[self.data_unchanged_after_refusal])
        except BaseException as exc:  # schemathesis raises an ExceptionGroup of failures
            first = str(exc).strip().splitlines()
            self._record(label, first[0] if first else type(exc).__name__,
                         f"1.{minor}: {exc}\n{case.as_curl_command(headers=headers)}")

    def _call(self, case, headers: dict[str, str]):
        """The answer, or None after ``REQUEST_TIMEOUT`` (the request's daemon thread is
        left behind, so that a hang fails the test instead of stopping it)."""
        return call_within(lambda: case.call(app=self.app, headers=headers))

    def _record(self, label: str, kind: str, detail: str) -> None:
        self.failures.setdefault((label, kind), detail[:3000])


def generate(view: dict, mode: GenerationMode) -> list:
    """The cases schemathesis makes from ``view`` in ``mode``, per operation."""
    cases: list = []
    schema = schemathesis_openapi.from_dict(view)
    for result in schema.get_all_operations():
        if isinstance(result, Err):
            raise result.err()  # the document does not load: test_openapi says why
        operation = result.ok()
        spec = operation.definition.raw
        with_input = "requestBody" in spec or any(p["in"] == "query"
                                                   for p in spec.get("parameters", ()))
        examples = MAX_EXAMPLES["with_input" if with_input else "path_only"]

        @hypothesis.settings(max_examples=examples, derandomize=True, deadline=None,
                             database=None, suppress_health_check=list(HealthCheck),
                             phases=[Phase.explicit, Phase.generate])
        @given(case=operation.as_strategy(generation_mode=mode))
        def collect(case) -> None:
            cases.append(case)

        with contextlib.suppress(Unsatisfiable):  # nothing to make invalid (GET / has none)
            collect()
    return cases


@pytest.fixture(scope="module")
def generated() -> dict[int, list]:
    """The cases, made once for all backends (they do not depend on the answers): valid
    ones from the steered view and from the plain one, invalid ones from the plain one."""
    document = openapi.document(ROUTES)
    return {minor: generate(fuzz_view(document, minor, steered=True), GenerationMode.POSITIVE)
            + generate(fuzz_view(document, minor), GenerationMode.POSITIVE)
            + on_known_paths(generate(fuzz_view(document, minor),
                                      GenerationMode.NEGATIVE))
            for minor in MINORS}


def on_known_paths(cases: list) -> list:
    """Invalid cases, sent to the seeded names in turn. Some are invalid only in their
    path (a name not in the list), which is no invalid request (a GET of a consumer
    without allocations answers 200); schemathesis takes an edited case for what it
    is then."""
    for number, case in enumerate(cases):
        case.path_parameters = {
            name: (KNOWN[name] + [UNKNOWN])[number % (len(KNOWN[name]) + 1)]
            for name in case.path_parameters or {}}
    return cases


def test_served_document_is_the_fuzzed_one(client):
    assert client.get("/openapi.json", token=None).json() == \
        json.loads(json.dumps(openapi.document(ROUTES)))


def test_fuzz(client, app, database, generated, capsys):
    seed(client)
    fuzzer = Fuzzer(app, database.engine)
    started = time.monotonic()
    for minor, cases in generated.items():
        for case in cases:
            fuzzer.send(case, minor)
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nfuzz[{database.backend}]: {fuzzer.requests} requests at "
              f"{', '.join(f'1.{m}' for m in MINORS)} in {elapsed:.1f} s, "
              f"{len(fuzzer.failures)} failures")
    report: list[Any] = [f"{label} {kind}\n{detail}"
                         for (label, kind), detail in sorted(fuzzer.failures.items())]
    assert not report, "\n\n".join(report)


def test_the_data_check_sees_a_refusal_that_changed_something(client, app, database):
    fuzzer = Fuzzer(app, database.engine)
    case = SimpleNamespace(method="PUT", operation=SimpleNamespace(label="PUT /x"))
    fuzzer._before = fingerprint(database.engine)
    fuzzer.data_unchanged_after_refusal(None, SimpleNamespace(status_code=409), case)
    client.create_provider("changed meanwhile")
    with pytest.raises(AssertionError, match="PUT /x answered 400 but changed the data"):
        fuzzer.data_unchanged_after_refusal(None, SimpleNamespace(status_code=400), case)


# Hostile values (tests/support/hostile_values.py) in every field, query parameter and path
# parameter of every described operation: one request each, from a valid base.

# Query and path parameters are tried at the newest version.
HOSTILE_MINOR = MAX.minor


@dataclass(frozen=True)
class Slot:
    """Where a query parameter takes a hostile value: "{}" in ``template``; ``extra``
    parameters go with it (a numbered group's resources, for instance)."""

    kind: str  # "string" (a character) or "integer" (a number)
    template: str
    extra: tuple[tuple[str, str], ...] = ()


def _within(text: str) -> str:
    """``text`` with a slot in its middle."""
    return insert(text, "{}")


_GROUP_1 = (("resources1", "DISK_GB:1"),)
QUERY_SLOTS: dict[str, list[Slot]] = {
    "name": [Slot("string", "c{}n")],
    "/traits name": [Slot("string", "in:CUSTOM_{}FAST"), Slot("string", "startswith:CUS{}TOM")],
    "uuid": [Slot("string", _within(RP))],
    "member_of": [Slot("string", _within(AGG)), Slot("string", "in:" + _within(AGG))],
    "resources": [Slot("integer", "VCPU:{}"), Slot("string", "VC{}PU:1")],
    "in_tree": [Slot("string", _within(RP))],
    "required": [Slot("string", "CUSTOM_{}FAST")],
    "root_required": [Slot("string", "CUSTOM_{}FAST")],
    "same_subtree": [Slot("string", "_{}A", (("resources_A", "VCPU:1"),))],
    "group_policy": [Slot("string", "no{}ne")],
    "limit": [Slot("integer", "{}")],
    "explain_limit": [Slot("integer", "{}")],
    "exclude_roots": [Slot("string", _within(RP))],
    "add": [Slot("integer", "2xVCPU:{}"), Slot("string", "2xVC{}PU:8*2.0")],
    "associated": [Slot("string", "tr{}ue")],
    "project_id": [Slot("string", "pr{}oj")],
    "user_id": [Slot("string", "us{}er")],
    "consumer_type": [Slot("string", "INST{}ANCE")],
    "offset": [Slot("integer", "{}")],
    "q": [Slot("string", "c{}n")],
    "roots": [Slot("string", _within(RP))],
    "resource_class": [Slot("string", "VC{}PU")],
    "uuids": [Slot("string", f"{RP},{_within(CHILD)}")],
    "kind": [Slot("string", "over_{}capacity")],
    "consumer_uuid": [Slot("string", _within(CONSUMER))],
    "resource_provider_uuid": [Slot("string", _within(RP))],
    "since": [Slot("string", "2026{}-01-01")], "until": [Slot("string", "2026{}-01-01")],
    "marker": [Slot("integer", "{}")],
}
# The numbered request groups, which the document describes once (as ``resources``...).
GRANULAR_SLOTS: dict[str, list[Slot]] = {
    "resources1": [Slot("integer", "VCPU:{}"), Slot("string", "VC{}PU:1")],
    "required1": [Slot("string", "CUSTOM_{}FAST", _GROUP_1)],
    "member_of1": [Slot("string", "in:" + _within(AGG), _GROUP_1)],
    "in_tree1": [Slot("string", _within(RP), _GROUP_1)],
}
GRANULAR_AT = ("/allocation_candidates", "/explain/allocation_candidates", "/headroom")
# The query an operation needs to do any work.
BASE_QUERIES: dict[str, tuple[tuple[str, str], ...]] = {
    "/allocation_candidates": (("resources", "VCPU:1"),),
    "/explain/allocation_candidates": (("resources", "VCPU:1"),),
    "/headroom": (("resources", "VCPU:1"),),
    "/usages": (("project_id", "proj"),),
}
# Path parameters as the seed names them.
PATH_VALUES = {"uuid": RP, "consumer_uuid": CONSUMER, "resource_class": "VCPU",
               "/resource_classes/{name} name": "CUSTOM_GPU", "/traits/{name} name": "CUSTOM_FAST"}


def _inventory(total: int, generation: bool = False) -> dict[str, Any]:
    """An inventory record with every field (the others as their defaults)."""
    record: dict[str, Any] = {"total": total, "reserved": 0, "min_unit": 1,
                              "max_unit": 2**31 - 1, "step_size": 1, "allocation_ratio": 1.0}
    if generation:
        record["resource_provider_generation"] = Generation(RP)
    return record


def _inventories() -> dict[str, Any]:
    """RP's inventories as seeded (every field of the first one written out)."""
    return {"resource_provider_generation": Generation(RP),
            "inventories": {"VCPU": _inventory(32, generation=True),
                            "MEMORY_MB": {"total": 65536}, "DISK_GB": {"total": 1000}}}


def _consumer(minor: int) -> dict[str, Any]:
    """CONSUMER's allocations as seeded, in the format of 1.minor, every field there."""
    resources = {"VCPU": 2, "DISK_GB": 10}
    body: dict[str, Any]
    if minor < 12:
        body = {"allocations": [{"resource_provider": {"uuid": RP}, "resources": resources}]}
    else:
        body = {"allocations": {RP: {"resources": resources, "generation": Generation(RP)}}}
    if minor >= 8:
        body.update(project_id="proj", user_id="user")
    if minor >= 28:
        body["consumer_generation"] = ConsumerGeneration(CONSUMER)
    if minor >= 34:
        body["mappings"] = {"_A": [RP]}
    if minor >= 38:
        body["consumer_type"] = "INSTANCE"
    return body


# Per operation, for 1.minor: path parameters and a body, valid and changing nothing but
# generations (or making something new), with every field the document describes there.
BASES: dict[tuple[str, str], Callable[[int], tuple[dict[str, str], Any]]] = {
    ("POST", "/resource_providers"): lambda minor: (
        {}, {"name": Fresh("name"), "uuid": Fresh("uuid")}
        | ({"parent_provider_uuid": RP} if minor >= 14 else {})),
    ("PUT", "/resource_providers/{uuid}"): lambda minor: (
        ({"uuid": RP}, {"name": "cn"}) if minor < 14
        else ({"uuid": CHILD}, {"name": "numa", "parent_provider_uuid": RP})),
    ("PUT", "/resource_providers/{uuid}/inventories"): lambda minor: (
        {"uuid": RP}, _inventories()),
    ("POST", "/resource_providers/{uuid}/inventories"): lambda minor: (
        {"uuid": RP}, {"resource_class": "CUSTOM_GPU", **_inventory(4, generation=True)}),
    ("PUT", "/resource_providers/{uuid}/inventories/{resource_class}"): lambda minor: (
        {"uuid": RP, "resource_class": "VCPU"}, _inventory(32, generation=True)),
    ("PUT", "/resource_providers/{uuid}/traits"): lambda minor: (
        {"uuid": RP}, {"traits": ["CUSTOM_FAST"], "resource_provider_generation": Generation(RP)}),
    ("PUT", "/resource_providers/{uuid}/aggregates"): lambda minor: (
        {"uuid": RP}, [AGG] if minor < 19
        else {"aggregates": [AGG], "resource_provider_generation": Generation(RP)}),
    ("POST", "/resource_classes"): lambda minor: ({}, {"name": Fresh("class")}),
    ("PUT", "/resource_classes/{name}"): lambda minor: (
        {"name": "CUSTOM_GPU"}, {"name": Fresh("class")}),
    ("PUT", "/allocations/{consumer_uuid}"): lambda minor: (
        {"consumer_uuid": CONSUMER}, _consumer(minor)),
    ("POST", "/allocations"): lambda minor: ({}, {CONSUMER: _consumer(minor)}),
    ("POST", "/reshaper"): lambda minor: (
        {}, {"inventories": {RP: _inventories()}, "allocations": {CONSUMER: _consumer(minor)}}),
}


# What undoes a write whose base request makes something new (else: a restore).
UNDOS = {("POST", "/resource_providers/{uuid}/inventories"):
         ("DELETE", f"/resource_providers/{RP}/inventories/CUSTOM_GPU")}


@dataclass
class Probe:
    """One request of the hostile run (``value`` None: a base request)."""

    method: str
    template: str
    minor: int
    path: dict[str, str]  # parameter -> its text as sent (percent-encoded)
    query: list[tuple[str, str]] = field(default_factory=list)  # as sent
    body: Any = None  # a template (None: no body)
    schema: dict | None = None  # the body's
    leaf: Leaf | None = None
    value: Any = None
    where: str = "base request"
    refused_because: str | None = None  # why the document refuses the path or query

    @property
    def label(self) -> str:
        return f"{self.method} {self.template}"


@functools.cache
def views() -> dict[int, dict]:
    """The served document at each minor version."""
    document = openapi.document(ROUTES)
    return {minor: openapi.document_at(document, Version(1, minor))
            for minor in range(MAX.minor + 1)}


def body_schemas() -> dict[tuple[str, str], dict[int, dict]]:
    """Per operation, each distinct body schema at the newest version that has it."""
    found: dict[tuple[str, str], dict[str, int]] = {}
    for minor, view in views().items():
        for template, methods in view["paths"].items():
            for method, spec in methods.items():
                content = spec.get("requestBody", {}).get("content", {})
                if "application/json" in content:
                    text = json.dumps(content["application/json"]["schema"], sort_keys=True)
                    found.setdefault((method.upper(), template), {})[text] = minor
    return {key: {minor: json.loads(text) for text, minor in schemas.items()}
            for key, schemas in found.items()}


def hostile_probes() -> dict[str, list[Probe]]:
    """Every hostile request, per operation.

    Bodies: the base of each version with a body schema of its own, then each hostile
    value of its kind in each field, at the newest version that has the field (an
    older version gets the fields that only it has, as the list-shaped allocations of
    1.0-1.11). Path and query parameters: at ``HOSTILE_MINOR``, one at a time, the
    others as the base has them.
    """
    probes: dict[str, list[Probe]] = {}
    for (method, template), schemas in body_schemas().items():
        found = probes.setdefault(_item(method, template), [])
        probed: set[str] = set()
        for minor, schema in sorted(schemas.items(), reverse=True):
            path, body = BASES[(method, template)](minor)
            base = Probe(method, template, minor, path, body=body, schema=schema)
            found.append(base)
            for leaf in leaves(body, schema):
                if leaf.field in probed:
                    continue
                probed.add(leaf.field)
                found.extend(replace(base, leaf=leaf, value=value,
                                     where=f"body {leaf.field} (1.{minor})")
                             for value in FIELD_VALUES[leaf.kind])
    for template, methods in views()[HOSTILE_MINOR]["paths"].items():
        for method, spec in methods.items():
            found = probes.setdefault(_item(method.upper(), template), [])
            found.extend(_parameter_probes(method.upper(), template, spec))
    return {item: found for item, found in sorted(probes.items()) if found}


# The test item of the operations without a body: they share one seed.
WITHOUT_BODY = "operations without a body"


def _item(method: str, template: str) -> str:
    """The test item that sends an operation's probes: its own if it has a body."""
    return f"{method} {template}" if (method, template) in BASES else WITHOUT_BODY


def _parameter_probes(method: str, template: str, spec: dict) -> Iterator[Probe]:
    params = {param["name"]: param for param in spec.get("parameters", ())}
    has_body = "application/json" in spec.get("requestBody", {}).get("content", {})
    path, body = BASES[(method, template)](HOSTILE_MINOR) if has_body else ({}, None)
    path = {name: path.get(name) or PATH_VALUES.get(f"{template} {name}") or PATH_VALUES[name]
            for name, param in params.items() if param["in"] == "path"}
    schema = body_schemas().get((method, template), {}).get(HOSTILE_MINOR)
    base = Probe(method, template, HOSTILE_MINOR, path, body=body, schema=schema)
    for name in path:
        for character in CHARACTERS:
            yield replace(base, path={**path, name: insert(path[name], PERCENT[character])},
                          value=character, where=f"path {name}",
                          refused_because=refused_by(params[name]["schema"],
                                                     insert(path[name], character)))
        yield replace(base, path={**path, name: path[name] + TRAILING_PERCENT},
                      value=TRAILING, where=f"path {name} (trailing newline)",
                      refused_because=refused_by(params[name]["schema"],
                                                 path[name] + TRAILING))
    names = [name for name, param in params.items() if param["in"] == "query"]
    for name in names + (list(GRANULAR_SLOTS) if template in GRANULAR_AT else []):
        for slot in (QUERY_SLOTS.get(f"{template} {name}") or QUERY_SLOTS.get(name)
                     or GRANULAR_SLOTS[name]):
            for text in SLOT_VALUES[slot.kind]:
                value = unquote(text, errors="surrogatepass")
                query = [(other, base_value)
                         for other, base_value in BASE_QUERIES.get(template, ())
                         if other != name]
                query += [*slot.extra, (name, slot.template.format(text))]
                yield replace(base, query=query, value=value,
                              where=f"query {name}={slot.template}",
                              refused_because=refused_by(params[name]["schema"],
                                                         slot.template.format(value))
                              if name in params else None)
            # A valid value, then a newline.
            valid = slot.template.format("1" if slot.kind == "integer" else "")
            query = [(other, base_value) for other, base_value in BASE_QUERIES.get(template, ())
                     if other != name]
            query += [*slot.extra, (name, valid + TRAILING_PERCENT)]
            yield replace(base, query=query, value=TRAILING,
                          where=f"query {name}={slot.template} (trailing newline)",
                          refused_because=refused_by(params[name]["schema"], valid + TRAILING)
                          if name in params else None)


class ServerErrors(logging.Handler):
    """The exceptions the app logs (an unexpected one is logged as it answers 500)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.caught: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info and record.exc_info[0] is not None:
            self.caught.append(server_error(record.exc_info))

    def take(self) -> list[tuple[str, str]]:
        caught, self.caught = self.caught, []
        return caught


def stored(engine: sa.Engine) -> dict[str, frozenset[tuple]]:
    """What the tables hold, by names rather than row ids (and without generations and
    times): the same after a restore of the seed as after the seed."""
    with engine.connect() as conn:
        return {name: frozenset(tuple(row) for row in conn.execute(query))
                for name, query in _contents().items()}


@functools.cache
def _contents() -> dict[str, sa.Select]:
    rp = t.resource_providers
    parent, root, owner = rp.alias("parent"), rp.alias("root"), rp.alias("owner")
    rc, inv, alloc = t.resource_classes, t.inventories, t.allocations
    consumers, rpt, rpa = t.consumers, t.resource_provider_traits, t.resource_provider_aggregates
    queries: dict[str, sa.Select] = {
        "providers": sa.select(rp.c.uuid, rp.c.name, parent.c.uuid, root.c.uuid).select_from(rp)
        .outerjoin(parent, rp.c.parent_provider_id == parent.c.id)
        .outerjoin(root, rp.c.root_provider_id == root.c.id),
        "inventories": sa.select(owner.c.uuid, rc.c.name, inv.c.total, inv.c.reserved,
                                 inv.c.min_unit, inv.c.max_unit, inv.c.step_size,
                                 inv.c.allocation_ratio).select_from(inv)
        .join(owner, inv.c.resource_provider_id == owner.c.id)
        .join(rc, inv.c.resource_class_id == rc.c.id),
        "allocations": sa.select(owner.c.uuid, rc.c.name, alloc.c.consumer_id, alloc.c.used)
        .select_from(alloc).join(owner, alloc.c.resource_provider_id == owner.c.id)
        .join(rc, alloc.c.resource_class_id == rc.c.id),
        "consumers": sa.select(consumers.c.uuid, t.projects.c.external_id,
                               t.users.c.external_id, t.consumer_types.c.name)
        .select_from(consumers).join(t.projects, consumers.c.project_id == t.projects.c.id)
        .join(t.users, consumers.c.user_id == t.users.c.id)
        .outerjoin(t.consumer_types, consumers.c.consumer_type_id == t.consumer_types.c.id),
        "provider traits": sa.select(owner.c.uuid, t.traits.c.name).select_from(rpt)
        .join(owner, rpt.c.resource_provider_id == owner.c.id)
        .join(t.traits, rpt.c.trait_id == t.traits.c.id),
        "provider aggregates": sa.select(owner.c.uuid, t.placement_aggregates.c.uuid)
        .select_from(rpa).join(owner, rpa.c.resource_provider_id == owner.c.id)
        .join(t.placement_aggregates, rpa.c.aggregate_id == t.placement_aggregates.c.id),
        "classes": sa.select(rc.c.name),
        "traits": sa.select(t.traits.c.name),
        "projects": sa.select(t.projects.c.external_id),
        "users": sa.select(t.users.c.external_id),
        "aggregates": sa.select(t.placement_aggregates.c.uuid),
        "consumer types": sa.select(t.consumer_types.c.name),
    }
    return queries


def reads_of(changed: dict[str, set[tuple]]) -> list[tuple[str, str, str]]:
    """(operation, path, query) of the reads that use the changed rows."""
    providers: set[str] = set()
    classes: set[str] = set()
    consumers: set[str] = set()
    owners: set[tuple[str, str]] = set()  # (project, user)
    for table, rows in changed.items():
        for row in rows:
            if table == "providers":
                providers.update(uuid for uuid in (row[0], row[2], row[3]) if uuid is not None)
            elif table in ("inventories", "allocations", "provider traits",
                           "provider aggregates"):
                providers.add(row[0])
                if table in ("inventories", "allocations"):
                    classes.add(row[1])
                if table == "allocations":
                    consumers.add(row[2])
            elif table == "consumers":
                consumers.add(row[0])
                owners.add((row[1], row[2]))
            elif table == "classes":
                classes.add(row[0])
    found = [("/resource_providers", "/resource_providers", "")]
    below = ["inventories", "usages", "allocations"]
    below += ["traits"] if "provider traits" in changed else []
    below += ["aggregates"] if "provider aggregates" in changed else []
    for uuid in sorted(providers):
        found += [(f"/resource_providers/{{uuid}}/{name}",
                   f"/resource_providers/{_escape(uuid)}/{name}", "") for name in below]
    for name in sorted(classes):
        found += [(template, template, f"resources={_escape(name)}:1")
                  for template in ("/allocation_candidates", "/resource_providers")]
    for uuid in sorted(consumers):
        found += [("/allocations/{consumer_uuid}", f"/allocations/{_escape(uuid)}", ""),
                  ("/dashboard/api/consumers/{consumer_uuid}",
                   f"/dashboard/api/consumers/{_escape(uuid)}", "")]
    found += [("/usages", "/usages", f"project_id={_escape(project)}&user_id={_escape(user)}")
              for project, user in sorted(owners)]
    for tables, template, query in (
            ({"classes"}, "/resource_classes", ""),
            ({"traits", "provider traits"}, "/traits", "associated=true"),
            ({"providers"}, "/dashboard/api/providers", ""),
            ({"inventories", "allocations"}, "/dashboard/api/summary", ""),
            ({"consumers", "allocations"}, "/dashboard/api/projects", "")):
        if changed.keys() & tables:
            found.append((template, template, query))
    return found


def _shape(content: bytes) -> bytes:
    """An answer's body but for what no check looks at: an error's wording and request
    id (which name the request's values)."""
    try:
        body = json.loads(content)
    except ValueError:
        return content
    if not isinstance(body, dict) or not isinstance(body.get("errors"), list):
        return content
    for error in body["errors"]:
        if isinstance(error, dict):
            error.update({key: type(error[key]).__name__ for key in ("detail", "request_id")
                          if key in error})
    return json.dumps(body, sort_keys=True).encode()


def _escape(text: str) -> str:
    """``text`` percent-encoded for a path segment or a query value."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@dataclass
class Answer:
    status: int
    headers: dict[str, list[str]]
    content: bytes
    elapsed: float


@dataclass
class Problem:
    """One distinct failure: the first request that showed it, and every value that did."""

    request: str
    status: int
    detail: str
    values: list[str] = field(default_factory=list)


class HostileRun:
    """Sends probes and checks each answer; after a write that stored something the
    seed has not, reads it back, then restores the seed."""

    def __init__(self, app, database, client, errors: ServerErrors) -> None:
        self.app = app
        self.database = database
        self.client = client
        self.errors = errors
        self.schemas: dict[int, Any] = {}
        self.verdicts: dict[tuple, list[str]] = {}
        self.undoes: set[tuple[str, int]] = set()  # (operation, minor) whose base is an undo
        self.problems: dict[tuple[str, str, str], Problem] = {}
        self.requests = 0
        self.restores = 0
        self._fresh = 0
        self._known: str | None = None  # the fingerprint, while nothing was written since
        self._generations: dict[Any, Any] = {}  # the same
        self._seeded = stored(database.engine)

    def exchange(self, method: str, path: str, query: str, body: bytes | None,
                 minor: int) -> Answer | None:
        """The app's answer (None after ``REQUEST_TIMEOUT``). The path and query reach it
        as a WSGI server passes them on: the path's percent-escapes undone (its bytes as
        latin-1), the query's kept."""
        headers = {**HEADERS, "Accept": "application/json",
                   openapi.VERSION_HEADER: f"placement 1.{minor}"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        env = falcon.testing.create_environ(path="/", query_string=query, method=method,
                                            headers=headers, body=body or b"")
        env["PATH_INFO"] = unquote_to_bytes(path).decode("latin-1")
        env["RAW_URI"] = path + (f"?{query}" if query else "")

        def call() -> Answer:
            started = time.monotonic()
            start_response = falcon.testing.StartResponseMock()
            content = b"".join(falcon.testing.helpers.closed_wsgi_iterable(
                self.app(env, start_response)))
            returned: dict[str, list[str]] = {}
            for name, value in start_response.headers or ():
                returned.setdefault(name.lower(), []).append(value)
            return Answer(int(str(start_response.status).split()[0]), returned,
                          content, time.monotonic() - started)

        self.requests += 1
        return call_within(call)

    def problems_of(self, method: str, template: str, minor: int, path: str, query: str,
                    body: bytes | None, answer: Answer) -> list[str]:
        """A 5xx with the exception the app logged, or what the answer does that the
        document does not describe (status, content type, headers, body)."""
        caught = self.errors.take()
        if answer.status >= 500:
            what = "; ".join(dict.fromkeys(f"{kind}: {message}" for kind, message in caught))
            return [f"{answer.status} {what or repr(answer.content[:300])}"]
        # An answer like one checked before gets its verdict.
        seen = (method, template, minor, answer.status, _shape(answer.content),
                tuple(sorted((name, tuple(values)) for name, values in answer.headers.items()
                             if name not in ("x-openstack-request-id", "content-length"))))
        if seen not in self.verdicts:
            self.verdicts[seen] = self.nonconformance(method, template, minor, path, query,
                                                      body, answer)
        return self.verdicts[seen]

    def nonconformance(self, method: str, template: str, minor: int, path: str, query: str,
                       body: bytes | None, answer: Answer) -> list[str]:
        if minor not in self.schemas:
            self.schemas[minor] = schemathesis_openapi.from_dict(
                {key: value for key, value in views()[minor].items() if key != "security"})
        operation = self.schemas[minor][template][method]
        case = operation.Case(path_parameters={name: "x"
                                               for name in re.findall(r"{(\w+)}", template)})
        url = f"http://localhost{path}" + (f"?{query}" if query else "")
        response = Response(status_code=answer.status, headers=answer.headers,
                            content=answer.content, elapsed=answer.elapsed, verify=False,
                            request=requests.Request(method, url, data=body).prepare())
        try:
            case.validate_response(response, checks=CONFORMANCE)
        except BaseException as exc:  # a group of schemathesis failures
            return [f"{answer.status} {getattr(failure, 'title', failure)}"
                    for failure in getattr(exc, "exceptions", [exc])]
        return []

    def value_of(self, placeholder: Any) -> Any:
        if isinstance(placeholder, Fresh):
            self._fresh += 1
            return {"uuid": f"0f0e0d0c-0b0a-4909-8807-{0x100000000000 + self._fresh:012x}",
                    "name": f"fresh {self._fresh}",
                    "class": f"CUSTOM_FRESH_{self._fresh}"}[placeholder.kind]
        if placeholder not in self._generations:
            if isinstance(placeholder, Generation):
                shown = self.client.get(f"/resource_providers/{placeholder.uuid}",
                                        version="1.39")
                self._generations[placeholder] = shown.json()["generation"]
            else:
                shown = self.client.get(f"/allocations/{placeholder.uuid}", version="1.39")
                self._generations[placeholder] = shown.json().get("consumer_generation")
        return self._generations[placeholder]

    def fingerprint(self) -> str:
        if self._known is None:
            self._known = fingerprint(self.database.engine)
        return self._known

    def send(self, probe: Probe) -> None:
        """The probe, checked: no 5xx; an answer the document describes; a 2xx only for
        what it describes as valid (and for a base request); a refusal that changes
        nothing; after a write that stores something new, no read of it fails."""
        body = None
        refused_because = probe.refused_because
        if probe.body is not None:
            body = resolve(probe.body, self.value_of)
            if probe.leaf is not None:
                body = put(body, probe.leaf, probe.value)
                assert probe.schema is not None
                refused_because = refused_by(probe.schema, body)
        raw = None if body is None else to_json(body)
        path = probe.template
        for name, text in probe.path.items():
            path = path.replace("{" + name + "}", text)
        query = "&".join(f"{name}={value}" for name, value in probe.query)
        write = probe.method != "GET"
        before = self.fingerprint() if write else None
        self.errors.take()
        answer = self.exchange(probe.method, path, query, raw, probe.minor)
        request = (f"{probe.method} {path}{'?' + query if query else ''} @1.{probe.minor}"
                   + ("" if raw is None else f" {raw.decode()[:2000]}"))
        if answer is None:
            self.record(probe, "", f"no answer within {REQUEST_TIMEOUT} s", request, 0)
            return
        status = answer.status
        for problem in self.problems_of(probe.method, probe.template, probe.minor, path,
                                        query, raw, answer):
            self.record(probe, "", problem, request, status)
        if probe.value is None and not 200 <= status < 300:
            self.record(probe, "", f"{status} refuses the base request: "
                        f"{answer.content[:300]!r}", request, status)
        if refused_because is not None and 200 <= status < 300:
            self.record(probe, "", f"{status} accepts what the document refuses: "
                        f"{refused_because}", request, status)
        if not write:
            return
        self._known = None
        if not 200 <= status < 300:
            if self.fingerprint() == before:
                return
            self.record(probe, "", f"{status} but the data changed", request, status)
        self._generations.clear()
        changed = self.changed()
        if probe.value is None and not changed:
            self.undoes.add((probe.label, probe.minor))
        elif changed:
            if probe.value is not None:
                self.read_back(probe, request, changed)
            self.undo(probe)

    def changed(self) -> dict[str, set[tuple]]:
        """The rows stored or gone since the seed, per table."""
        now = stored(self.database.engine)
        return {table: set(rows ^ self._seeded[table]) for table, rows in now.items()
                if rows != self._seeded[table]}

    def undo(self, probe: Probe) -> None:
        """Back to the seed: by the base request where it rewrites what the seed has,
        else by a restore."""
        key = (probe.method, probe.template)
        if (probe.label, probe.minor) in self.undoes or key in UNDOS:
            base = next(other for other in PROBES[_item(*key)] if other.value is None
                        and other.label == probe.label and other.minor == probe.minor)
            path = base.template
            for name, text in base.path.items():
                path = path.replace("{" + name + "}", text)
            if key in UNDOS:
                self.exchange(*UNDOS[key], "", None, base.minor)
            else:
                self.exchange(base.method, path, "",
                              to_json(resolve(base.body, self.value_of)), base.minor)
            self.errors.take()
            self._generations.clear()
            self._known = None
            if not self.changed():
                return
        self.restore()

    def read_back(self, probe: Probe, request: str, changed: dict[str, set[tuple]]) -> None:
        """The reads that use what the probe wrote: a value may be valid alone and
        break one."""
        for template, path, query in reads_of(changed):
            self.errors.take()
            answer = self.exchange("GET", path, query, None, HOSTILE_MINOR)
            shown = f"GET {path}{'?' + query if query else ''}"
            if answer is None:
                self.record(probe, f"then GET {template}", f"no answer within "
                            f"{REQUEST_TIMEOUT} s", f"{request}\n  then {shown}", 0)
                continue
            for problem in self.problems_of("GET", template, HOSTILE_MINOR, path, query,
                                            None, answer):
                self.record(probe, f"then GET {template}", problem,
                            f"{request}\n  then {shown}", answer.status)

    def restore(self) -> None:
        """The seed again, and nothing else."""
        self.restores += 1
        self.database.reset()
        seed(self.client)
        self._known = None
        self._generations.clear()

    def record(self, probe: Probe, after: str, problem: str, request: str,
               status: int) -> None:
        where = f"{probe.where} {after}".strip()
        # The same failure: the same place, and the same kind (the problem's first words).
        kind = re.sub(r"\d+", "N", problem.split(": ", 1)[0])[:200]
        found = self.problems.setdefault((probe.label, where, kind),
                                         Problem(request, status, problem))
        shown = repr(probe.value)
        if shown not in found.values:
            found.values.append(shown)

    def report(self) -> list[str]:
        return [f"{label} | {where} | {problem.detail}\n  values: {', '.join(problem.values)}"
                f"\n  e.g. {problem.request} -> {problem.status}"
                for (label, where, _), problem in sorted(self.problems.items())]


PROBES = hostile_probes()


@pytest.fixture
def server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    logger = logging.getLogger("allotment")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.mark.parametrize("item", list(PROBES))
def test_hostile_values(item, client, app, database, server_errors, capsys):
    """Each hostile value in each place of the requests of ``item`` (an operation with
    a body, or all without one): see ``hostile_probes`` and ``HostileRun.send``."""
    seed(client)
    run = HostileRun(app, database, client, server_errors)
    started = time.monotonic()
    for probe in PROBES[item]:
        run.send(probe)
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(f"\nhostile[{database.backend}] {item}: {len(PROBES[item])} probes, "
              f"{run.requests} requests, {run.restores} restores in {elapsed:.1f} s, "
              f"{len(run.problems)} failures")
    report = run.report()
    if report:
        pytest.fail(f"{len(report)} failures of {item} on {database.backend}:\n\n"
                    + "\n\n".join(report), pytrace=False)


def test_the_hostile_probes_reach_every_described_place():
    """Each base body has every field of its schema and is valid to the document; every
    query and path parameter of every version has values and is probed at
    ``HOSTILE_MINOR``; every operation that takes anything is probed."""
    sample = {Generation: 0, ConsumerGeneration: 0}
    fresh = {"uuid": UNKNOWN, "name": "fresh", "class": "CUSTOM_FRESH"}

    def value_of(placeholder: Any) -> Any:
        return fresh[placeholder.kind] if isinstance(placeholder, Fresh) \
            else sample[type(placeholder)]

    for (method, template), schemas in body_schemas().items():
        for minor, schema in schemas.items():
            _, body = BASES[(method, template)](minor)
            missing = described(schema) - {leaf.field for leaf in leaves(body, schema)}
            assert not missing, (method, template, minor, missing)
            assert refused_by(schema, resolve(body, value_of)) is None, (method, template, minor)
    probed = {(probe.method, probe.template) for found in PROBES.values() for probe in found}
    newest = views()[HOSTILE_MINOR]["paths"]
    for view in views().values():
        for template, methods in view["paths"].items():
            for method, spec in methods.items():
                there = {param["name"] for param in newest.get(template, {})
                         .get(method, {}).get("parameters", ())}
                for param in spec.get("parameters", ()):
                    name, known = param["name"], (QUERY_SLOTS if param["in"] == "query"
                                                  else PATH_VALUES)
                    assert f"{template} {name}" in known or name in known, (template, name)
                    assert name in there, (method, template, name)
                if spec.get("parameters") or "requestBody" in spec:
                    assert (method.upper(), template) in probed, (method, template)


def test_the_hostile_run_reports_a_read_that_a_stored_value_breaks(client, app, database,
                                                                     server_errors):
    """A value the app takes, then a read of it that answers 500: reported with the
    exception the app logged, under the write's place; the seed is back after."""
    seed(client)

    def app_whose_usages_break(env, start_response):
        if env["REQUEST_METHOD"] == "GET" and env["PATH_INFO"].endswith("/usages"):
            try:
                raise ZeroDivisionError("no usages today")
            except ZeroDivisionError:
                logging.getLogger("allotment.http.errors").exception("Uncaught exception")
            start_response("500 Internal Server Error", [("Content-Type", "application/json")])
            return [b'{"errors": [{"status": 500, "title": "Internal Server Error", '
                    b'"detail": "An unexpected error occurred: ZeroDivisionError"}]}']
        return app(env, start_response)

    run = HostileRun(app_whose_usages_break, database, client, server_errors)
    base = next(probe for probe in
                PROBES["PUT /resource_providers/{uuid}/inventories/{resource_class}"]
                if probe.value is None)
    assert base.schema is not None
    ratio = next(leaf for leaf in leaves(base.body, base.schema)
                 if leaf.field == "allocation_ratio")
    run.send(base)
    run.send(replace(base, leaf=ratio, value=2.0, where="body allocation_ratio"))
    [report] = run.report()
    assert report.startswith(
        "PUT /resource_providers/{uuid}/inventories/{resource_class} | body allocation_ratio "
        "then GET /resource_providers/{uuid}/usages | 500 ZeroDivisionError (raised in "), report
    assert "no usages today" in report and "values: 2.0" in report
    assert not run.changed()
