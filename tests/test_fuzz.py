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
"""

from __future__ import annotations

import functools
import hashlib
import json
import queue
import threading
import time
from types import SimpleNamespace
from typing import Any

import hypothesis
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import openapi as schemathesis_openapi
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi import checks as conformance

from allotment import openapi
from allotment.db import tables as t
from allotment.http.microversion import Version
from allotment.schemas.common import RC_PATTERN, UUID_PATTERN
from allotment.wsgi import ROUTES
from tests.conftest import make_conf

MINORS = (0, 14, 28, 39)
# Cases per operation and mode: more where a body or query string can be wrong.
MAX_EXAMPLES = {"with_input": 8, "path_only": 3}
REQUEST_TIMEOUT = 10.0
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
        answers: queue.Queue = queue.Queue()

        def call() -> None:
            try:
                answers.put(case.call(app=self.app, headers=headers))
            except BaseException as exc:  # handed to the test's thread
                answers.put(exc)

        threading.Thread(target=call, daemon=True).start()
        try:
            answer = answers.get(timeout=REQUEST_TIMEOUT)
        except queue.Empty:
            return None
        if isinstance(answer, BaseException):
            raise answer
        return answer

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

        try:
            collect()
        except Unsatisfiable:
            pass  # nothing to make invalid (GET / has no parameters)
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
