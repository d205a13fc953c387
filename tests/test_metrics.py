"""Prometheus metrics at /metrics: off by default, an admin's token on the API's
address (none on a metrics_listen listener), the cloud's capacity.

In-process against every backend; live servers with two worker processes are
in tests/live/test_metrics_workers.py.
"""

from __future__ import annotations

import uuid

import falcon.testing
import pytest
from prometheus_client.parser import text_string_to_metric_families

from allotment import config
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.claims_support import provider_with, put
from tests.support.client import PlacementClient

C1 = "11111111-1111-1111-1111-111111111111"
C2 = "22222222-2222-2222-2222-222222222222"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (0 if none)."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


@pytest.fixture
def metrics_client(database) -> PlacementClient:
    conf = make_conf(database.url, allotment__metrics=True)
    return PlacementClient(make_app(conf, db=database.db, prepare=False))


def scrape(client: PlacementClient) -> Samples:
    resp = client.get("/metrics")  # the admin's token
    assert resp.status == 200, resp
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(resp.text)


def test_off_by_default(client):
    resp = client.get("/metrics")
    assert resp.status == 404
    assert resp.json()["errors"][0]["title"] == "Not Found"


def test_api_address_wants_a_token_and_the_rule(metrics_client):
    """No provider's name reaches a caller without a token: on the API's address
    /metrics is an API route, behind allotment:metrics (default: admin)."""
    metrics_client.create_provider("secret-host-1")
    samples = scrape(metrics_client)
    assert value(samples, "placement_capacity_scrape_success") == 1
    refused = metrics_client.get("/metrics", token=None)
    assert refused.status == 401 and "secret-host-1" not in refused.text
    assert metrics_client.get("/resource_providers", token=None).status == 401
    reader = metrics_client.get("/metrics", headers={"X-Roles": "reader"})
    assert reader.status == 403 and "secret-host-1" not in reader.text
    assert reader.json()["errors"][0]["detail"].endswith(
        "Policy does not allow allotment:metrics to be performed.  ")
    # Prometheus wants text; the API's JSON Accept negotiation does not apply.
    text = metrics_client.get("/metrics", headers={"Accept": "text/plain"})
    assert text.status == 200 and "secret-host-1" in text.text
    assert text.headers["cache-control"] == "no-store"


def test_metrics_rule_in_policy_file(database, tmp_path):
    """An operator grants the scrape to a monitoring role in policy.yaml."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text('"allotment:metrics": "role:admin or role:monitoring"\n')
    ini = tmp_path / "placement.conf"
    ini.write_text(f"[api]\nauth_strategy = noauth2\n[allotment]\nmetrics = True\n"
                   f"[placement_database]\nconnection = {database.url}\n"
                   f"[oslo_policy]\npolicy_file = {policy_file}\n")
    conf = config.load([str(ini)])
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    assert client.get("/metrics", headers={"X-Roles": "monitoring"}).status == 200
    assert client.get("/metrics", headers={"X-Roles": "reader"}).status == 403


def test_capacity_numbers(metrics_client):
    root = provider_with(metrics_client, "cn-1", VCPU={"total": 16, "reserved": 2,
                                                       "allocation_ratio": 4.0, "max_unit": 8},
                         MEMORY_MB={"total": 8192, "min_unit": 256, "step_size": 256})
    child = provider_with(metrics_client, 'numa "0"\\', parent=root, DISK_GB=500)
    other = provider_with(metrics_client, "cn-2", VCPU=4)
    bare = metrics_client.create_provider("bare")["uuid"]
    assert put(metrics_client, C1, {root: {"VCPU": 3, "MEMORY_MB": 512},
                                    child: {"DISK_GB": 20}}).status == 204
    assert put(metrics_client, C2, {root: {"VCPU": 2}, other: {"VCPU": 4}}).status == 204
    samples = scrape(metrics_client)

    def inventory(rp: str, rc: str) -> dict[str, float]:
        return {field: value(samples, f"placement_inventory_{field}", provider_uuid=rp,
                             resource_class=rc)
                for field in ("total", "reserved", "allocation_ratio", "used")}

    assert inventory(root, "VCPU") == {"total": 16, "reserved": 2, "allocation_ratio": 4.0,
                                       "used": 5}
    assert inventory(root, "MEMORY_MB") == {"total": 8192, "reserved": 0,
                                            "allocation_ratio": 1.0, "used": 512}
    assert inventory(child, "DISK_GB")["used"] == 20
    assert inventory(other, "VCPU")["used"] == 4
    # Exactly one sample per inventory record, labelled with the provider's name.
    totals = {dict(labels)["provider_uuid"]: dict(labels)
              for (name, labels) in samples if name == "placement_inventory_total"}
    assert len([n for (n, _) in samples if n == "placement_inventory_total"]) == 4
    assert totals[child]["provider_name"] == 'numa "0"\\'
    info = {dict(labels)["provider_uuid"]: dict(labels)
            for (name, labels) in samples if name == "placement_resource_provider_info"}
    assert set(info) == {root, child, other, bare}
    assert info[child]["root_provider_uuid"] == root
    assert info[child]["parent_provider_uuid"] == root
    assert info[root]["parent_provider_uuid"] == ""


def test_request_and_claim_metrics(metrics_client):
    rp = provider_with(metrics_client, "cn", VCPU=8)
    before = scrape(metrics_client)
    route = "/resource_providers/{uuid}"
    for _ in range(3):
        assert metrics_client.get(f"/resource_providers/{rp}").status == 200
    assert metrics_client.get(f"/resource_providers/{uuid.uuid4()}").status == 404
    assert metrics_client.get("/nowhere").status == 404
    assert put(metrics_client, C1, {rp: {"VCPU": 2}}).status == 204
    stale = put(metrics_client, C1, {rp: {"VCPU": 3}}, generation=None)
    assert stale.status == 409 and stale.error_code == "placement.concurrent_update"
    assert put(metrics_client, C2, {rp: {"VCPU": 100}}).status == 409
    resp = metrics_client.get("/allocation_candidates?resources=VCPU:1", version="1.39")
    assert len(resp.json()["allocation_requests"]) == 1
    after = scrape(metrics_client)

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("placement_http_requests_total", route=route, method="GET",
                 status="200") == 3
    assert delta("placement_http_requests_total", route=route, status="404") == 1
    assert delta("placement_http_requests_total", route="unmatched", status="404") == 1
    assert delta("placement_http_request_duration_seconds_count", route=route,
                 method="GET") == 4
    # No raw paths or uuids as labels.
    assert not any(rp in dict(labels).get("route", "") for (_, labels) in after)
    operation = "PUT /allocations/{consumer_uuid}"
    assert delta("placement_allocation_writes_total", operation=operation,
                 outcome="written") == 1
    assert delta("placement_allocation_writes_total", operation=operation,
                 outcome="conflict") == 1
    assert delta("placement_allocation_writes_total", operation=operation,
                 outcome="refused") == 1
    assert delta("placement_generation_conflicts_total", generation="consumer") == 1
    assert delta("placement_refusals_total", status="409",
                 code="placement.concurrent_update") == 1
    assert delta("placement_refusals_total", status="404") == 2
    assert delta("placement_allocation_candidates_returned_count", path="single") == 1
    assert delta("placement_allocation_candidates_returned_sum", path="single") == 1
    assert delta("placement_allocation_candidates_duration_seconds_count", path="single") == 1
    assert value(after, "placement_db_pool_size") >= 1


def _call(app, path: str, port: str, name: str = "127.0.0.1") -> tuple[str, bytes]:
    env = falcon.testing.create_environ(path=path, headers={"X-Auth-Token": "admin"})
    env["SERVER_PORT"], env["SERVER_NAME"] = port, name
    start = falcon.testing.StartResponseMock()
    body = b"".join(app(env, start))
    return start.status, body


def test_separate_listener_in_process(database):
    conf = make_conf(database.url, allotment__metrics=True,
                     allotment__metrics_listen="127.0.0.1:9181")
    app = make_app(conf, db=database.db, prepare=False)
    status, body = _call(app, "/metrics", "9181")
    assert status.startswith("200") and b"placement_inventory_total" in body
    assert _call(app, "/metrics", "9181", name="10.0.0.1")[0].startswith("404")
    assert _call(app, "/resource_providers", "9181")[0].startswith("404")
    assert _call(app, "/metrics", "8778")[0].startswith("404")
    assert _call(app, "/resource_providers", "8778")[0].startswith("200")


def test_audit_findings_by_kind(metrics_client, database, monkeypatch):
    """allotment_audit_findings{kind}: the audit's counts, kept for a short while."""
    import sqlalchemy as sa
    from sqlalchemy.pool import NullPool

    from allotment.db import tables as t
    from allotment.db.engine import normalize_url
    from allotment.metrics import exposition

    kinds = ("over_capacity", "empty_consumer", "old_migration",
             "allocation_without_inventory", "incomplete_consumer")
    samples = scrape(metrics_client)
    assert {kind: value(samples, "allotment_audit_findings", kind=kind)
            for kind in kinds} == dict.fromkeys(kinds, 0)
    assert value(samples, "allotment_audit_scrape_success") == 1
    # A provider over capacity (its inventory shrunk under its usage) and a consumer
    # left without allocations by another writer.
    rp = provider_with(metrics_client, "cn", VCPU={"total": 8, "allocation_ratio": 2.0})
    assert put(metrics_client, C1, {rp: {"VCPU": 12}}).status == 204
    assert put(metrics_client, C2, {rp: {"VCPU": 1}}).status == 204
    gen = metrics_client.get(f"/resource_providers/{rp}").json()["generation"]
    assert metrics_client.put(f"/resource_providers/{rp}/inventories/VCPU", {
        "resource_provider_generation": gen, "total": 8}).status == 200
    engine = sa.create_engine(normalize_url(database.url), poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(t.allocations.delete().where(t.allocations.c.consumer_id == C2))
    engine.dispose()
    # Counted a moment ago: the same numbers until the interval has passed.
    assert value(scrape(metrics_client), "allotment_audit_findings",
                 kind="over_capacity") == 0
    monkeypatch.setattr(exposition, "AUDIT_CACHE_SECONDS", 0.0)
    samples = scrape(metrics_client)
    assert {kind: value(samples, "allotment_audit_findings", kind=kind)
            for kind in kinds} == {**dict.fromkeys(kinds, 0), "over_capacity": 1,
                                   "empty_consumer": 1}


def test_capacity_scrape_answers_while_the_database_is_gone(database, monkeypatch):
    """The database unreachable (Database.read raises DatabaseUnavailable, not a driver
    error): the capacity families say so with scrape_success 0 instead of failing."""
    import contextlib

    from allotment.db.availability import DatabaseUnavailable
    from allotment.metrics import exposition

    @contextlib.contextmanager
    def gone():
        raise DatabaseUnavailable("connection refused")
        yield  # pragma: no cover

    monkeypatch.setattr(database.db, "read", gone)
    samples = parse(exposition.render_capacity(database.db).decode())
    assert value(samples, "placement_capacity_scrape_success") == 0


AGG_A = "aaaaaaaa-0000-4000-8000-00000000000a"
AGG_B = "bbbbbbbb-0000-4000-8000-00000000000b"
SHAPES = {"m1.small": "resources=VCPU:1,MEMORY_MB:2048",
          "m1.large": f"resources=VCPU:4,MEMORY_MB:8192&member_of=in:{AGG_A},{AGG_B}"}


def test_headroom_per_request_shape(database, monkeypatch):
    """allotment_headroom{request}: GET /headroom's counts for the shapes of
    [allotment] headroom_requests, in all and per aggregate; kept for a while."""
    from allotment.metrics import headroom

    conf = make_conf(database.url, allotment__metrics=True, allotment__headroom_requests=[
        f"{name} = {query}" for name, query in SHAPES.items()])
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    hosts = [provider_with(client, f"cn-{i}", VCPU={"total": 16, "allocation_ratio": 2.0},
                           MEMORY_MB={"total": 32768, "reserved": 512})
             for i in range(4)]
    for rp, aggregates in zip(hosts, ([AGG_A], [AGG_A], [AGG_B], []), strict=True):
        gen = client.get(f"/resource_providers/{rp}").json()["generation"]
        assert client.put(f"/resource_providers/{rp}/aggregates", {
            "aggregates": aggregates, "resource_provider_generation": gen},
            version="1.19").status == 200
    assert put(client, C1, {hosts[0]: {"VCPU": 10, "MEMORY_MB": 16384}}).status == 204
    samples = scrape(client)
    for name, query in SHAPES.items():
        expected = client.get(f"/headroom?{query}", version="1.39").json()
        assert expected["total"] > 0
        assert value(samples, "allotment_headroom", request=name) == expected["total"]
        assert value(samples, "allotment_headroom_optimal", request=name) == 1
        assert value(samples, "allotment_headroom_scrape_success", request=name) == 1
        for aggregate, count in expected.get("aggregates", {}).items():
            assert value(samples, "allotment_headroom_aggregate", request=name,
                         aggregate=aggregate) == count
    # By hand: an idle host takes 3 m1.large (memory: 32256 / 8192), cn-0 one more.
    assert value(samples, "allotment_headroom", request="m1.large") == 3 + 3 + 1
    assert value(samples, "allotment_headroom_aggregate", request="m1.large",
                 aggregate=AGG_A) == 4
    assert not value(samples, "allotment_headroom_aggregate", request="m1.small")
    # Counted a moment ago: the same numbers until the interval has passed.
    assert put(client, C2, {hosts[1]: {"MEMORY_MB": 16384}}).status == 204
    assert value(scrape(client), "allotment_headroom", request="m1.large") == 7
    monkeypatch.setattr(headroom, "HEADROOM_CACHE_SECONDS", 0.0)
    assert value(scrape(client), "allotment_headroom", request="m1.large") == 5


def test_headroom_shape_not_counted(database):
    """A class not created yet: that shape's scrape_success is 0, the others count."""
    conf = make_conf(database.url, allotment__metrics=True, allotment__headroom_requests=[
        "gpu = resources=CUSTOM_NOT_YET:1", "small = resources=VCPU:1"])
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    provider_with(client, "cn", VCPU=2)
    samples = scrape(client)
    assert value(samples, "allotment_headroom_scrape_success", request="gpu") == 0
    assert ("allotment_headroom", frozenset({("request", "gpu")})) not in samples
    assert value(samples, "allotment_headroom_scrape_success", request="small") == 1
    assert value(samples, "allotment_headroom", request="small") == 2


@pytest.mark.parametrize("entry, reason", [
    ("resources=VCPU:1", "expected '<name> = <query string>'"),
    ("m1 large = resources=VCPU:1", "the name 'm1 large' must be"),
    ("m1 = resources=VCPU:1&bogus=1", "m1: Invalid query string parameters"),
    ("m1 = resources=VCPU:0", "m1: "),
    ("m1 = required=HW_CPU_X86_AVX2", "m1: "),
])
def test_headroom_requests_refused_at_start(database, entry, reason):
    conf = make_conf(database.url, allotment__metrics=True,
                     allotment__headroom_requests=[entry])
    with pytest.raises(ValueError, match="headroom_requests") as refused:
        make_app(conf, db=database.db, prepare=False)
    assert reason in str(refused.value)


def test_headroom_request_named_twice(database):
    conf = make_conf(database.url, allotment__metrics=True, allotment__headroom_requests=[
        "m1 = resources=VCPU:1", "m1 = resources=VCPU:2"])
    with pytest.raises(ValueError, match="'m1' is named twice"):
        make_app(conf, db=database.db, prepare=False)


def test_metrics_listen_without_a_host_is_loopback():
    from allotment.metrics.exposition import parse_listen

    assert parse_listen("9778") == ("127.0.0.1", 9778)
    assert parse_listen(":9778") == ("127.0.0.1", 9778)
    assert parse_listen("10.0.0.5:9778") == ("10.0.0.5", 9778)
    assert parse_listen("[::1]:9778") == ("::1", 9778)
    assert parse_listen(None) is None
    for bad in ("host", "host:", "host:99999", "host:1x", "1234567"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_scrapes_share_one_capacity_read(database, monkeypatch):
    """Ten scrapes at once, then more, read the capacity from the database once
    per CAPACITY_CACHE_SECONDS (issue 32, item 7: ten scrapers of a large cloud
    made every scrape a read of every inventory), and say how old it is."""
    import gzip
    from concurrent.futures import ThreadPoolExecutor

    import falcon.testing

    from allotment.ledger import capacity
    from allotment.metrics import exposition

    reads = []
    real = capacity.inventory_report

    def counted(conn):
        reads.append(1)
        return real(conn)

    monkeypatch.setattr(capacity, "inventory_report", counted)
    app = make_app(make_conf(database.url, allotment__metrics=True), db=database.db,
                   prepare=False)
    client = PlacementClient(app)
    rp = provider_with(client, "cn", VCPU=8)
    with ThreadPoolExecutor(10) as pool:
        scrapes = list(pool.map(lambda _: scrape(client), range(10)))
    scrapes += [scrape(client) for _ in range(5)]
    assert len(reads) == 1
    for samples in scrapes:
        assert value(samples, "placement_inventory_total", provider_uuid=rp,
                     resource_class="VCPU") == 8
        assert 0 <= value(samples, "placement_capacity_age_seconds") \
            < exposition.CAPACITY_CACHE_SECONDS
    # Gzipped: the same families (the capacity compressed once, with its read).
    env = falcon.testing.create_environ(path="/metrics",
                                        headers={"Accept-Encoding": "gzip",
                                                 "X-Auth-Token": "admin"})
    start = falcon.testing.StartResponseMock()
    body = b"".join(app(env, start))
    assert dict(start.headers)["content-encoding"] == "gzip"
    samples = parse(gzip.decompress(body).decode())
    assert value(samples, "placement_inventory_total", provider_uuid=rp,
                 resource_class="VCPU") == 8
    assert value(samples, "placement_capacity_scrape_success") == 1
    assert len(reads) == 1


def test_capacity_read_again_once_stale(database):
    from allotment.metrics import exposition

    now = [100.0]
    report = exposition.CapacityReport(database.db, max_age=10.0, clock=lambda: now[0])
    client = PlacementClient(make_app(make_conf(database.url), db=database.db,
                                      prepare=False))
    rp = provider_with(client, "cn", VCPU=8)
    first = parse(report.render()[0].decode())
    assert value(first, "placement_inventory_total", provider_uuid=rp) == 8
    rp2 = provider_with(client, "cn-2", VCPU=4)
    now[0] += 9.9
    plain, _, age = report.render()
    assert value(parse(plain.decode()), "placement_inventory_total", provider_uuid=rp2) == 0
    assert value(parse(age.decode()), "placement_capacity_age_seconds") == 9.9
    now[0] += 0.1
    assert value(parse(report.render()[0].decode()), "placement_inventory_total",
                 provider_uuid=rp2) == 4
    assert report.reads == 2
