"""Values that used to get a 500, or break a later read for everyone.

Each case runs on SQLite, PostgreSQL and MariaDB: the answer is a 4xx in the
Placement error format (or the correct answer), the data is unchanged, and
the reads that would use the value still answer.
"""

from __future__ import annotations

import datetime
import hashlib
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import capacity
from tests.support.client import PlacementClient

LATEST = "1.39"


def _fingerprint(database) -> str:
    """Every row of every upstream table, hashed (the change log is left out)."""
    digest = hashlib.sha256()
    with database.engine.connect() as conn:
        for table in t.metadata.sorted_tables:
            rows = conn.execute(sa.select(table).order_by(*table.primary_key.columns))
            for row in rows:
                digest.update(repr(tuple(row)).encode())
    return digest.hexdigest()


def _assert_refused(resp, status: int = 400) -> None:
    assert resp.status == status, resp
    error = resp.json()["errors"][0]
    assert error["status"] == status and error["request_id"].startswith("req-"), resp


def _provider_with_vcpu(client: PlacementClient, total: int = 8) -> str:
    rp = client.create_provider("cn1")["uuid"]
    resp = client.put(f"/resource_providers/{rp}/inventories",
                      {"resource_provider_generation": 0,
                       "inventories": {"VCPU": {"total": total}}}, version=LATEST)
    assert resp.status == 200, resp
    return rp


def _reads_answer(client: PlacementClient, rp: str) -> None:
    """The reads every scheduler and operator makes still answer."""
    for path in ("/allocation_candidates?resources=VCPU:1",
                 "/allocation_candidates?resources=VCPU:1&limit=1",
                 "/resource_providers?resources=VCPU:1",
                 f"/resource_providers/{rp}/inventories",
                 f"/resource_providers/{rp}/usages", "/resource_providers"):
        resp = client.get(path, version=LATEST)
        assert resp.status == 200, (path, resp)
    for version in ("1.10", "1.17", "1.28"):
        resp = client.get("/allocation_candidates?resources=VCPU:1", version=version)
        assert resp.status == 200, (version, resp)


# --- allocation_ratio and the capacity it makes --------------------------------

HUGE_RATIOS = [1e38, 3.4e38, 1e20, float(capacity.MAX_CAPACITY) * 2]


@pytest.mark.parametrize("ratio", HUGE_RATIOS)
def test_a_ratio_that_makes_capacity_overflow_is_refused(client, database, ratio) -> None:
    rp = _provider_with_vcpu(client)
    before = _fingerprint(database)
    for method, path, body in (
        ("PUT", f"/resource_providers/{rp}/inventories",
         {"resource_provider_generation": 1,
          "inventories": {"VCPU": {"total": 8, "allocation_ratio": ratio}}}),
        ("PUT", f"/resource_providers/{rp}/inventories/VCPU",
         {"resource_provider_generation": 1, "total": 8, "allocation_ratio": ratio}),
        ("POST", f"/resource_providers/{rp}/inventories",
         {"resource_class": "MEMORY_MB", "total": 1024, "allocation_ratio": ratio}),
    ):
        resp = client.request(method, path, body, version=LATEST)
        _assert_refused(resp)
        assert "allocation_ratio" in resp.detail, resp
    assert _fingerprint(database) == before
    _reads_answer(client, rp)


def test_the_largest_capacity_allowed_is_served(client) -> None:
    """At the bound itself every read works, and its numbers are exact."""
    rp = client.create_provider("cn1")["uuid"]
    # 2**22: exact in MariaDB's single-precision column too; capacity 2**53 - 2**22.
    ratio = 4194304.0
    resp = client.put(f"/resource_providers/{rp}/inventories",
                      {"resource_provider_generation": 0,
                       "inventories": {"VCPU": {"total": capacity.MAX_INT,
                                                "allocation_ratio": ratio}}},
                      version=LATEST)
    assert resp.status == 200, resp
    _reads_answer(client, rp)
    answer = client.get("/allocation_candidates?resources=VCPU:2147483647",
                        version=LATEST).json()
    # MariaDB gives a FLOAT back to 6 significant digits (4194300): as upstream.
    shown = client.get(f"/resource_providers/{rp}/inventories/VCPU",
                       version=LATEST).json()["allocation_ratio"]
    assert shown == pytest.approx(ratio, rel=1e-5)
    assert answer["provider_summaries"][rp]["resources"]["VCPU"]["capacity"] \
        == int(capacity.MAX_INT * shown)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "-NaN"])
def test_non_finite_numbers_in_json_are_refused(client, database, token) -> None:
    rp = _provider_with_vcpu(client)
    before = _fingerprint(database)
    raw = ('{"resource_provider_generation": 1, "inventories": {"VCPU": '
           f'{{"total": 8, "allocation_ratio": {token}}}}}}}')
    resp = client.put(f"/resource_providers/{rp}/inventories", raw=raw,
                      headers={"Content-Type": "application/json"}, version=LATEST)
    _assert_refused(resp)
    assert "Malformed JSON" in resp.detail, resp
    assert _fingerprint(database) == before
    _reads_answer(client, rp)


@pytest.mark.parametrize("ratio", [1e38, float("nan"), float("inf"), -1e38])
def test_an_extreme_ratio_stored_behind_our_back_breaks_no_read(client, database,
                                                               ratio) -> None:
    """Written by another writer (upstream accepts 1e38, and NaN on PostgreSQL):
    the capacity it makes is shown at its bound, and nothing answers 500."""
    rp = _provider_with_vcpu(client)
    if database.backend != "postgresql" and ratio != ratio:
        pytest.skip("only PostgreSQL's float column stores NaN")
    if database.backend == "mysql" and abs(ratio) == float("inf"):
        pytest.skip("MariaDB's FLOAT column cannot store infinity")
    with database.engine.begin() as conn:
        conn.execute(t.inventories.update().values(allocation_ratio=ratio))
    _reads_answer(client, rp)
    inventory = client.get(f"/resource_providers/{rp}/inventories/VCPU",
                           version=LATEST).json()
    assert isinstance(inventory["allocation_ratio"], float)
    # A claim against it is judged by the bounded capacity.
    consumer = str(uuid.uuid4())
    resp = client.put(f"/allocations/{consumer}", {
        "allocations": {rp: {"resources": {"VCPU": 1}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"}, version=LATEST)
    assert resp.status in (204, 409), resp
    assert resp.status == (204 if ratio > 0 else 409), resp
    _reads_answer(client, rp)


# --- NUL and lone surrogates in text --------------------------------------------

def _claim(rp: str, **fields: Any) -> dict[str, Any]:
    return {"allocations": {rp: {"resources": {"VCPU": 1}}},
            "project_id": "p", "user_id": "u", "consumer_generation": None,
            "consumer_type": "INSTANCE", **fields}


@pytest.mark.parametrize("bad", ["a\u0000b", "\u0000"])
def test_nul_in_any_text_of_a_body_is_refused(client, database, bad) -> None:
    rp = _provider_with_vcpu(client)
    consumer = str(uuid.uuid4())
    before = _fingerprint(database)
    cases = [
        ("POST", "/resource_providers", {"name": bad}),
        ("PUT", f"/resource_providers/{rp}", {"name": bad}),
        ("POST", "/resource_classes", {"name": "CUSTOM_A" + bad}),
        ("PUT", f"/allocations/{consumer}", _claim(rp, project_id=bad)),
        ("PUT", f"/allocations/{consumer}", _claim(rp, user_id=bad)),
        ("PUT", f"/allocations/{consumer}", _claim(rp, consumer_type="A" + bad)),
        ("POST", "/allocations", {consumer: _claim(rp, project_id=bad)}),
        ("PUT", f"/resource_providers/{rp}/traits",
         {"resource_provider_generation": 1, "traits": ["CUSTOM_X" + bad]}),
        ("PUT", f"/resource_providers/{rp}/aggregates",
         {"resource_provider_generation": 1, "aggregates": [bad]}),
    ]
    for method, path, body in cases:
        resp = client.request(method, path, body, version=LATEST)
        assert 400 <= resp.status < 500, (method, path, resp)
        assert resp.json()["errors"][0]["status"] == resp.status
    assert _fingerprint(database) == before
    _reads_answer(client, rp)


@pytest.mark.parametrize("escape", ["%00", "a%00b"])
def test_nul_in_any_query_parameter_is_refused_or_matches_nothing(client, escape) -> None:
    rp = _provider_with_vcpu(client)
    for path in (f"/resource_providers?name={escape}",
                 f"/resource_providers?uuid={escape}",
                 f"/resource_providers?member_of={escape}",
                 f"/resource_providers?required=CUSTOM_{escape}",
                 f"/usages?project_id={escape}",
                 f"/usages?project_id=p&user_id={escape}",
                 f"/usages?project_id=p&consumer_type={escape}",
                 f"/allocation_candidates?resources=VCPU:1&required=CUSTOM_{escape}",
                 f"/allocation_candidates?resources=VCPU:1&in_tree={escape}",
                 f"/resource_providers/{rp}/traits?x={escape}",
                 f"/traits?name=in:{escape}",
                 f"/traits?name=startswith:{escape}"):
        resp = client.get(path, version=LATEST)
        assert resp.status in (200, 400), (path, resp)
        if resp.status == 400:
            _assert_refused(resp)
    # A NUL in a name matches nothing (no provider can hold one).
    resp = client.get(f"/resource_providers?name={escape}", version=LATEST)
    assert resp.status == 400, resp
    assert "NUL" in resp.detail, resp


def test_lone_surrogates_are_refused(client, database) -> None:
    rp = _provider_with_vcpu(client)
    before = _fingerprint(database)
    raw = '{"name": "a\\ud800b"}'
    resp = client.post("/resource_providers", raw=raw,
                       headers={"Content-Type": "application/json"}, version=LATEST)
    _assert_refused(resp)
    for path in ("/resource_providers?name=a%ED%A0%80b", "/usages?project_id=%ED%B0%80"):
        _assert_refused(client.get(path, version=LATEST))
    assert _fingerprint(database) == before
    _reads_answer(client, rp)


# --- amounts past every integer column ------------------------------------------

@pytest.mark.parametrize("amount", [2**31 - 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64,
                                    10**20, 10**400, pytest.param("1" + "0" * 5000, id="10^5000")])
def test_huge_amounts_in_a_query_match_nothing(client, amount) -> None:
    rp = _provider_with_vcpu(client)
    for path in (f"/resource_providers?resources=VCPU:{amount}",
                 f"/allocation_candidates?resources=VCPU:{amount}",
                 f"/allocation_candidates?resources=VCPU:1&resources1=VCPU:{amount}"):
        resp = client.get(path, version=LATEST)
        assert resp.status == 200, (path, resp)
        body = resp.json()
        listed = body.get("resource_providers", body.get("allocation_requests"))
        assert listed == [], (path, resp)
    _reads_answer(client, rp)


@pytest.mark.parametrize("amount", [2**31, 2**63, 10**20])
def test_huge_amounts_in_a_claim_are_refused(client, database, amount) -> None:
    """More than any allocation may hold (max_unit is at most 2**31 - 1): the
    claim does not fit, as any claim over capacity (409), however large."""
    rp = client.create_provider("cn1")["uuid"]
    resp = client.put(f"/resource_providers/{rp}/inventories",
                      {"resource_provider_generation": 0,
                       "inventories": {"VCPU": {"total": capacity.MAX_INT,
                                                "allocation_ratio": 1000.0}}}, version=LATEST)
    assert resp.status == 200, resp
    before = _fingerprint(database)
    consumer = str(uuid.uuid4())
    body = _claim(rp)
    body["allocations"][rp]["resources"]["VCPU"] = amount
    _assert_refused(client.put(f"/allocations/{consumer}", body, version=LATEST), 409)
    post = {consumer: {key: value for key, value in body.items() if key != "consumer_type"}}
    _assert_refused(client.post("/allocations", post, version="1.28"), 409)
    assert _fingerprint(database) == before


@pytest.mark.parametrize("generation", [2**31, 2**63, 10**20, -(2**63) - 1])
def test_huge_generations_are_refused_or_conflict(client, database, generation) -> None:
    rp = _provider_with_vcpu(client)
    before = _fingerprint(database)
    for method, path, body in (
        ("PUT", f"/resource_providers/{rp}/inventories",
         {"resource_provider_generation": generation, "inventories": {}}),
        ("PUT", f"/resource_providers/{rp}/traits",
         {"resource_provider_generation": generation, "traits": []}),
        ("PUT", f"/resource_providers/{rp}/aggregates",
         {"resource_provider_generation": generation, "aggregates": []}),
        ("PUT", f"/allocations/{uuid.uuid4()}",
         {**_claim(rp), "consumer_generation": generation}),
    ):
        resp = client.request(method, path, body, version=LATEST)
        assert resp.status in (400, 409), (path, resp)
        assert resp.json()["errors"][0]["status"] == resp.status
    assert _fingerprint(database) == before
    _reads_answer(client, rp)


def test_cloud_wide_totals_of_the_largest_capacities_stay_in_range(database) -> None:
    """Each capacity within the bound, but 1,100 of them add up past 2**63 (what
    orjson can write): the dashboard's totals saturate instead of answering 500."""
    from allotment.wsgi import make_app
    from tests.conftest import make_conf

    dash = PlacementClient(make_app(make_conf(database.url, allotment__dashboard=True),
                                    db=database.db, prepare=False))
    rp = _provider_with_vcpu(dash)
    now = datetime.datetime(2026, 12, 3)
    with database.engine.begin() as conn:
        vcpu = conn.execute(sa.select(t.resource_classes.c.id)
                            .where(t.resource_classes.c.name == "VCPU")).scalar_one()
        conn.execute(t.resource_providers.insert(), [
            {"uuid": str(uuid.uuid4()), "name": f"big-{i}", "generation": 0}
            for i in range(1100)])
        conn.execute(t.resource_providers.update()
                     .where(t.resource_providers.c.root_provider_id.is_(None))
                     .values(root_provider_id=t.resource_providers.c.id))
        ids = conn.execute(sa.select(t.resource_providers.c.id)
                           .where(t.resource_providers.c.name.like("big-%"))).scalars().all()
        conn.execute(t.inventories.insert(), [
            {"resource_provider_id": provider, "resource_class_id": vcpu,
             "total": capacity.MAX_INT, "reserved": 0, "min_unit": 1,
             "max_unit": capacity.MAX_INT, "step_size": 1, "allocation_ratio": 4194304.0,
             "created_at": now} for provider in ids])
    resp = dash.get("/dashboard/api/summary")
    assert resp.status == 200, resp
    totals = resp.json()["totals"]["VCPU"]
    assert totals["capacity"] == capacity.MAX_TOTAL
    _reads_answer(dash, rp)


@pytest.mark.parametrize("limit", [2**31, 2**63, 2**64, 10**20,
                                   pytest.param("1" + "0" * 5000, id="10^5000")])
def test_a_huge_limit_means_no_limit(client, limit) -> None:
    rp = _provider_with_vcpu(client)
    for path in (f"/allocation_candidates?resources=VCPU:1&limit={limit}",
                 f"/explain/allocation_candidates?resources=VCPU:1&limit={limit}",
                 f"/explain/allocation_candidates?resources=VCPU:1&resources1=VCPU:1"
                 f"&group_policy=none&limit={limit}"):
        resp = client.get(path, version=LATEST)
        assert resp.status == 200, (path, resp)
        assert len(resp.json()["allocation_requests"]) >= 1, (path, resp)
    resp = client.get(f"/headroom?resources=VCPU:1&limit={limit}", version=LATEST)
    assert resp.status == 200 and len(resp.json()["roots"]) == 1, resp
    _reads_answer(client, rp)


@pytest.mark.parametrize("number", ["9" * 20, pytest.param("9" * 5000, id="5000 nines")])
def test_a_huge_page_number_on_the_dashboard_is_a_400(database, number) -> None:
    from allotment.wsgi import make_app
    from tests.conftest import make_conf

    dash = PlacementClient(make_app(make_conf(database.url, allotment__dashboard=True),
                                    db=database.db, prepare=False))
    for path in (f"/dashboard/api/providers?limit={number}",
                 f"/dashboard/api/providers?offset={number}",
                 f"/dashboard/api/summary?limit={number}"):
        _assert_refused(dash.get(path))


# --- allotment's own routes: what the rest of the API refuses, they refuse ------

def _dashboard_client(database) -> PlacementClient:
    from allotment.wsgi import make_app
    from tests.conftest import make_conf

    return PlacementClient(make_app(make_conf(database.url, allotment__dashboard=True),
                                    db=database.db, prepare=False))


_UUID_HEX = "0123456789abcdef0123456789abcdef"
_UUID_DASHED = "01234567-89ab-cdef-0123-456789abcdef"


@pytest.mark.parametrize("path", [
    f"/history/allocations?consumer_uuid={_UUID_HEX}%0A",
    f"/history/allocations?consumer_uuid={_UUID_DASHED}%0A",
    f"/history/allocations?resource_provider_uuid={_UUID_HEX}%0A",
    f"/history/inventories?resource_provider_uuid={_UUID_DASHED}%0A",
    "/history/allocations?limit=5%0A",
    "/history/inventories?marker=5%0A",
    "/audit/allocations?limit=5%0A",
    "/headroom?resources=VCPU:1&add=2xVCPU:8%0A",
    "/headroom?resources=VCPU:1&add=2xVCPU:8*2.0%0A",
    "/allocation_candidates?resources%0A=VCPU:1",
])
def test_a_trailing_newline_is_refused(client, database, path) -> None:
    """A schema's ``$`` is the end of the text (JSON Schema's), not "before a final
    newline" (Python's): such values were taken, then failed further in (500)."""
    rp = _provider_with_vcpu(client)
    resp = client.get(path, version=LATEST)
    _assert_refused(resp)
    _reads_answer(client, rp)


@pytest.mark.parametrize("method, path, body", [
    ("POST", "/resource_classes", {"name": "CUSTOM_NEWLINE\n"}),
    ("PUT", "/allocations/{consumer}", _claim("{rp}", consumer_type="INSTANCE\n")),
])
def test_a_trailing_newline_in_a_body_is_refused(client, database, method, path, body) -> None:
    rp = _provider_with_vcpu(client)
    before = _fingerprint(database)
    if "allocations" in body:
        body = {**body, "allocations": {rp: body["allocations"]["{rp}"]}}
    resp = client.request(method, path.format(consumer=uuid.uuid4()), body, version=LATEST)
    _assert_refused(resp)
    assert "does not match" in resp.detail and "\\n" in resp.detail, resp
    assert _fingerprint(database) == before


def test_a_long_query_string_is_refused_with_a_code(client) -> None:
    long = "a" * (33 * 1024)
    resp = client.get(f"/audit/allocations?kind={long}", version=LATEST)
    _assert_refused(resp, 414)
    assert resp.error_code == "placement.undefined_code", resp
    # Before 1.23 no refusal carries a code.
    old = client.get(f"/resource_providers?name={long}", version="1.22")
    _assert_refused(old, 414)
    assert "code" not in old.json()["errors"][0], old


def test_the_add_form_is_shown_whole(client) -> None:
    _provider_with_vcpu(client)
    resp = client.get("/headroom?resources=VCPU:1&add=2xVCPU", version=LATEST)
    _assert_refused(resp)
    assert "COUNTxCLASS:TOTAL[*ALLOCATION_RATIO],..., e.g. 10xVCPU:64*4.0" in resp.detail, resp


@pytest.mark.parametrize("path", ["/dashboard/api/consumers/%ED%A0%80",
                                  "/dashboard/api/consumers/a%ED%BF%BFb",
                                  "/dashboard/api/providers/%ED%A0%80/children",
                                  "/dashboard/api/consumers/%FF"])
def test_a_path_that_is_no_utf8_is_refused_on_the_dashboard(database, path) -> None:
    """As a query string with such escapes is (not looked up as U+FFFD)."""
    dash = _dashboard_client(database)
    resp = dash.get(path)
    _assert_refused(resp)
    assert "no UTF-8" in resp.detail, resp
    assert dash.get(f"/dashboard/api/consumers/{uuid.uuid4()}").status == 200


def test_a_repeated_key_takes_its_last_value_on_allotments_routes(client) -> None:
    """As upstream's routes read a key that is not repeatable (WebOb's ``GET[key]``,
    and ``dict(GET)`` for the schema): doc/source/operating/history.md says so for allotment's."""
    rp = _provider_with_vcpu(client)
    for total in (9, 10, 11):
        resp = client.put(f"/resource_providers/{rp}/inventories/VCPU",
                          {"resource_provider_generation": total - 8, "total": total},
                          version=LATEST)
        assert resp.status == 200, resp
    page = client.get("/history/inventories?limit=1&limit=2", version=LATEST).json()
    assert len(page["entries"]) == 2, page
    refused = client.get("/history/inventories?limit=2&limit=x", version=LATEST)
    _assert_refused(refused)
    other = client.get(f"/history/inventories?resource_provider_uuid={uuid.uuid4()}"
                       f"&resource_provider_uuid={rp}", version=LATEST).json()
    assert len(other["entries"]) == 4, other


def test_a_schema_pattern_ends_where_json_schema_says() -> None:
    from allotment.http.patterns import python_pattern

    assert python_pattern("^[0-9]{1,4}$").pattern == r"^[0-9]{1,4}\Z"
    assert python_pattern("^a$|^b").pattern == r"^a\Z|^b"
    # An escaped "$" and one in a class are characters, not the end.
    assert python_pattern(r"^a\$[$]b$").pattern == r"^a\$[$]b\Z"
    assert python_pattern("^[]$]$").pattern == r"^[]$]\Z"
    assert python_pattern("^a$").search("a") and not python_pattern("^a$").search("a\n")
