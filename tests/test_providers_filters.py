"""GET /resource_providers filters over HTTP: name, uuid, in_tree, member_of, required,
resources, each with its microversion rules."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import providers
from allotment.ledger.filters import AggregateFilter, TraitFilter
from tests.support.claims_support import provider_with, put
from tests.support.client import PlacementClient

A1 = "f918801a-5e54-4bee-9095-09a9d0c786b8"
A2 = "a893eb5c-e2a0-4251-ab26-f71d3b0cfc0b"
A3 = "0d1fcd10-3b1e-4f39-a6f8-b1f2bf86fd54"  # no provider is in it
UNKNOWN = "5b0f2b40-9d3c-4c3e-a3a8-0e5e5b2d6a8e"  # no provider has it


def names(client: PlacementClient, query: str, version: str) -> list[str]:
    resp = client.get(f"/resource_providers{query}", version=version)
    assert resp.status == 200, (query, resp)
    return [rp["name"] for rp in resp.json()["resource_providers"]]


def refused(client: PlacementClient, query: str, version: str, *phrases: str) -> None:
    resp = client.get(f"/resource_providers{query}", version=version)
    assert resp.status == 400, (query, resp)
    for phrase in phrases:
        assert phrase in resp.detail, (query, resp)


@pytest.fixture
def forest(client) -> dict[str, str]:
    """r1 > ch > gc and r2 alone, with aggregates and traits; name -> uuid.

    aggregates: r1 [A1], ch [A1, A2], r2 [A2], gc none;
    traits: r1 [CUSTOM_A], ch [HW_CPU_X86_SSE], r2 [CUSTOM_A, CUSTOM_B], gc none.
    """
    r1 = client.create_provider("r1")["uuid"]
    ch = client.create_provider("ch", parent=r1)["uuid"]
    gc = client.create_provider("gc", parent=ch)["uuid"]
    r2 = client.create_provider("r2")["uuid"]
    for rp, aggs in ((r1, [A1]), (ch, [A1, A2]), (r2, [A2])):
        assert client.put(f"/resource_providers/{rp}/aggregates", aggs,
                          version="1.1").status == 200
    for name in ("CUSTOM_A", "CUSTOM_B"):
        client.put(f"/traits/{name}", version="1.6")
    for rp, traits in ((r1, ["CUSTOM_A"]), (ch, ["HW_CPU_X86_SSE"]),
                       (r2, ["CUSTOM_A", "CUSTOM_B"])):
        resp = client.put(f"/resource_providers/{rp}/traits",
                          {"traits": traits, "resource_provider_generation": 0}, version="1.6")
        assert resp.status == 200, resp
    return {"r1": r1, "ch": ch, "gc": gc, "r2": r2}


NAME_UUID_IN_TREE = [
    ("", ["r1", "ch", "gc", "r2"]),
    ("?name=ch", ["ch"]),
    ("?name=nope", []),
    ("?uuid={r2}", ["r2"]),
    (f"?uuid={UNKNOWN}", []),
    ("?name=r1&uuid={r2}", []),
    # Any member of a tree names the whole tree.
    ("?in_tree={gc}", ["r1", "ch", "gc"]),
    ("?in_tree={r2}", ["r2"]),
    (f"?in_tree={UNKNOWN}", []),
    ("?in_tree={r1}&name=gc", ["gc"]),
    ("?in_tree={r1}&member_of={A1}&required=CUSTOM_A", ["r1"]),
    ("?in_tree={r2}&member_of={A1}", []),
]


def test_name_uuid_and_in_tree(client, forest):
    for query, expected in NAME_UUID_IN_TREE:
        query = query.format(A1=A1, **forest)
        assert names(client, query, "1.39") == expected, query
    refused(client, "?in_tree=not-a-uuid", "1.14", "Invalid query string parameters")
    refused(client, f"?in_tree={forest['r1']}", "1.13", "Invalid query string parameters")


MEMBER_OF = [
    (f"?member_of={A1}", "1.3", ["r1", "ch"]),
    # An unknown aggregate in an any-of group is no obstacle; alone it matches nothing.
    (f"?member_of=in:{A1},{A3}", "1.3", ["r1", "ch"]),
    (f"?member_of=in:{A1},{A2}", "1.3", ["r1", "ch", "r2"]),
    (f"?member_of={A3}", "1.3", []),
    (f"?member_of=in:{A3},{UNKNOWN}", "1.3", []),
    # Repeated: every group must match (1.24).
    (f"?member_of={A1}&member_of={A2}", "1.24", ["ch"]),
    (f"?member_of=in:{A1},{A2}&member_of={A2}", "1.24", ["ch", "r2"]),
    (f"?member_of={A1}&member_of={A3}", "1.24", []),
    # Forbidden (1.32).
    (f"?member_of=!{A2}", "1.32", ["r1", "gc"]),
    (f"?member_of=!in:{A1},{A2}", "1.32", ["gc"]),
    (f"?member_of=!in:{A3},{UNKNOWN}", "1.32", ["r1", "ch", "gc", "r2"]),
    (f"?member_of={A1}&member_of=!{A2}", "1.32", ["r1"]),
    (f"?member_of=in:{A1},{A2}&member_of=!in:{A1},{A3}", "1.32", ["r2"]),
]
MEMBER_OF_REFUSED = [
    (f"?member_of={A1}", "1.2", "Invalid query string parameters"),
    (f"?member_of={A1}&member_of={A2}", "1.23",
     "Multiple member_of parameters are not supported"),
    (f"?member_of=!{A1}", "1.31",
     "Forbidden member_of parameters are not supported in the specified microversion"),
    (f"?member_of={A1},{A2}", "1.32",
     "Multiple values for 'member_of' must be prefixed with the 'in:' or '!in:' keyword"),
    (f"?member_of=in:{A1},nope", "1.32",
     "Expected 'member_of' parameter to contain valid UUID(s). Got: nope"),
]


def test_member_of(client, forest):
    for query, version, expected in MEMBER_OF:
        assert names(client, query, version) == expected, (query, version)
    for query, version, phrase in MEMBER_OF_REFUSED:
        refused(client, query, version, phrase)


REQUIRED = [
    ("?required=CUSTOM_A", "1.18", ["r1", "r2"]),
    ("?required=CUSTOM_A,CUSTOM_B", "1.18", ["r2"]),
    ("?required=HW_CPU_X86_AVX", "1.18", []),
    # Forbidden traits (1.22).
    ("?required=CUSTOM_A,!CUSTOM_B", "1.22", ["r1"]),
    ("?required=!CUSTOM_A", "1.22", ["ch", "gc"]),
    ("?required=!CUSTOM_A,!HW_CPU_X86_SSE", "1.22", ["gc"]),
    # Before 1.39 only the last of repeated parameters counts; then all do.
    ("?required=CUSTOM_A&required=!CUSTOM_B", "1.38", ["r1", "ch", "gc"]),
    ("?required=CUSTOM_A&required=!CUSTOM_B", "1.39", ["r1"]),
    # Any-of groups (1.39).
    ("?required=in:CUSTOM_B,HW_CPU_X86_SSE", "1.39", ["ch", "r2"]),
    ("?required=in:CUSTOM_A,HW_CPU_X86_SSE&required=!CUSTOM_B", "1.39", ["r1", "ch"]),
    ("?required=in:CUSTOM_A,CUSTOM_B&required=in:CUSTOM_B,HW_CPU_X86_SSE", "1.39", ["r2"]),
]
REQUIRED_REFUSED = [
    ("?required=CUSTOM_A", "1.17", "Invalid query string parameters"),
    ("?required=CUSTOM_NOPE", "1.18", "No such trait(s): CUSTOM_NOPE."),
    ("?required=CUSTOM_A,!CUSTOM_NOPE", "1.22", "No such trait(s): CUSTOM_NOPE."),
    ("?required=in:CUSTOM_A,CUSTOM_NOPE", "1.39", "No such trait(s): CUSTOM_NOPE."),
    ("?required=!CUSTOM_A", "1.21", "Expected 'required' parameter value of the form: "
                                    "HW_CPU_X86_VMX,CUSTOM_MAGIC. Got: !CUSTOM_A"),
    ("?required=in:CUSTOM_A,CUSTOM_B", "1.38",
     "The format 'in:HW_CPU_X86_VMX,CUSTOM_MAGIC' only supported since microversion 1.39"),
    ("?required=in:CUSTOM_A,!CUSTOM_B", "1.39", "does not support forbidden traits"),
    ("?required=CUSTOM_A,,CUSTOM_B", "1.22", "Got an empty trait in: CUSTOM_A,,CUSTOM_B"),
]


def test_required(client, forest):
    for query, version, expected in REQUIRED:
        assert names(client, query, version) == expected, (query, version)
    for query, version, phrase in REQUIRED_REFUSED:
        refused(client, query, version, phrase)


# Which check answers first when several names are unknown: a tree that
# does not exist (nothing), then a trait that does not exist (400), then an
# aggregate that does not exist (nothing), then a resource class (400);
# whether the names are looked up before the providers or after.
CHECK_ORDER = [
    (f"?in_tree={UNKNOWN}&required=CUSTOM_NOPE", None),
    (f"?in_tree={UNKNOWN}&required=!CUSTOM_NOPE", None),
    ("?in_tree={r1}&required=CUSTOM_NOPE", "No such trait(s): CUSTOM_NOPE."),
    ("?in_tree={r1}&required=!CUSTOM_NOPE", "No such trait(s): CUSTOM_NOPE."),
    (f"?member_of={UNKNOWN}&required=CUSTOM_NOPE", "No such trait(s): CUSTOM_NOPE."),
    (f"?member_of={A1}&required=CUSTOM_A,!CUSTOM_NOPE", "No such trait(s): CUSTOM_NOPE."),
    (f"?member_of={UNKNOWN}&resources=CUSTOM_NOPE:1", None),
    (f"?member_of={A1}&resources=CUSTOM_NOPE:1", "CUSTOM_NOPE"),
    (f"?member_of={UNKNOWN}&required=CUSTOM_NOPE&resources=CUSTOM_NOPE:1",
     "No such trait(s): CUSTOM_NOPE."),
]


def test_order_of_checks(client, forest):
    for query, phrase in CHECK_ORDER:
        query = query.format(**forest)
        if phrase is None:
            assert names(client, query, "1.39") == [], query
        else:
            refused(client, query, "1.39", phrase)


def make_capacities(client: PlacementClient) -> None:
    """Providers "a" and "b" whose free capacity the resources filter must compute.

    a: VCPU (4 - 1 reserved) * 2.0 = 6; DISK_GB 100 in units of 10..50, steps of 5.
    b: VCPU 8 of which 5 are allocated; MEMORY_MB 1024.
    """
    provider_with(client, "a", VCPU={"total": 4, "reserved": 1, "allocation_ratio": 2.0},
                  DISK_GB={"total": 100, "min_unit": 10, "max_unit": 50, "step_size": 5})
    b = provider_with(client, "b", VCPU=8, MEMORY_MB=1024)
    assert put(client, str(uuid.uuid4()), {b: {"VCPU": 5}}).status == 204
    client.put("/resource_classes/CUSTOM_GOLD", version="1.7")


RESOURCES = [
    ("VCPU:3", ["a", "b"]),
    ("VCPU:4", ["a"]),  # b has only 3 left
    ("VCPU:6", ["a"]),  # reserved and allocation ratio
    ("VCPU:7", []),
    ("DISK_GB:5", []),  # below min_unit
    ("DISK_GB:10", ["a"]),
    ("DISK_GB:50", ["a"]),
    ("DISK_GB:55", []),  # above max_unit
    ("DISK_GB:12", []),  # not a multiple of step_size
    ("DISK_GB:15", ["a"]),
    ("MEMORY_MB:1024", ["b"]),
    ("MEMORY_MB:1025", []),
    ("VCPU:1,MEMORY_MB:1", ["b"]),  # every class must fit
    ("VCPU:1,DISK_GB:10", ["a"]),
    ("VCPU:4,MEMORY_MB:1", []),
    ("CUSTOM_GOLD:1", []),  # a known class that nobody has
]
RESOURCES_REFUSED = [
    ("VCPU:1", "1.3", ["Invalid query string parameters"]),
    ("CUSTOM_NOPE:1", "1.4", ["Invalid resource class in resources parameter", "CUSTOM_NOPE"]),
    ("VCPU:1,CUSTOM_NOPE:1", "1.4",
     ["Invalid resource class in resources parameter", "CUSTOM_NOPE"]),
    ("VCPU:0", "1.4", ["Requested resource VCPU requires amount >= 1. Got: 0."]),
    ("VCPU:x", "1.4", ["Requested resource VCPU expected positive integer amount. Got: x."]),
    ("VCPU", "1.4", ["Badly formed resources parameter. Expected resources query string "
                     "parameter in form: ?resources=VCPU:2,MEMORY_MB:1024. Got: VCPU."]),
    ("", "1.4", ["Got: empty string."]),
]


def test_resources(client):
    make_capacities(client)
    for resources, expected in RESOURCES:
        assert names(client, f"?resources={resources}", "1.4") == expected, resources
    for resources, version, phrases in RESOURCES_REFUSED:
        refused(client, f"?resources={resources}", version, *phrases)


# Scans the transaction started on the providers' table and their traits',
# and on their indexes (where PostgreSQL counts an index probe): each
# per-provider check is one.
_SCANS = sa.text(
    "SELECT sum(pg_stat_get_xact_numscans(c.oid)) FROM pg_class c"
    " WHERE c.oid IN ('resource_providers'::regclass, 'resource_provider_traits'::regclass)"
    " OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid IN"
    " ('resource_providers'::regclass, 'resource_provider_traits'::regclass))")


def test_sharing_providers_of_big_aggregates_read_only_those_that_pass(database):
    # Nova's sharing-provider query: a host's aggregates (thousands of hosts
    # each in a real cloud) and a trait only the sharing providers have. The
    # answer is one provider; the database must not visit every member of the
    # aggregates (PostgreSQL fetched each by id and probed its traits: 40 ms
    # per call at 10,000 hosts).
    members = 3000
    sharing = uuid.UUID(int=members + 1)
    with database.engine.begin() as conn:
        conn.execute(t.resource_providers.insert(), [
            {"id": n, "uuid": str(uuid.UUID(int=n)), "name": f"bulk-{n}", "generation": 0,
             "root_provider_id": n} for n in range(1, members + 3)])
        conn.execute(t.placement_aggregates.insert(), [{"id": 1, "uuid": A1}])
        conn.execute(t.resource_provider_aggregates.insert(), [
            {"resource_provider_id": n, "aggregate_id": 1} for n in range(1, members + 2)])
        trait_id = conn.execute(sa.select(t.traits.c.id).where(
            t.traits.c.name == "MISC_SHARES_VIA_AGGREGATE")).scalar_one()
        # The sharing provider in the aggregate, and one outside it.
        conn.execute(t.resource_provider_traits.insert(), [
            {"resource_provider_id": n, "trait_id": trait_id} for n in (members + 1, members + 2)])
    query = providers.ProviderQuery(
        member_of=AggregateFilter(required=[{A1}]),
        required=TraitFilter(required=[{"MISC_SHARES_VIA_AGGREGATE"}]))
    with database.engine.connect() as conn, conn.begin():
        before = (conn.execute(_SCANS).scalar_one()
                  if database.backend == "postgresql" else 0)
        found = providers.list_providers(conn, query)
        if database.backend == "postgresql":
            scans = conn.execute(_SCANS).scalar_one() - before
            assert scans <= 10, scans
    assert [rp.uuid for rp in found] == [str(sharing)]


# Rows of a table fetched by its index scans in this transaction (live rows:
# an index's entries also count the dead rows earlier tests left).
_ROWS_FETCHED = sa.text("SELECT pg_stat_get_xact_tuples_fetched(CAST(:table AS regclass))")


@pytest.mark.parametrize("case", ["a rare trait in a big aggregate",
                                  "a common trait in a small aggregate",
                                  "a common trait in a big aggregate",
                                  "a rare trait in a big and a small aggregate"])
def test_the_smallest_filter_drives_a_provider_list(database, case):
    # With several required filters, PostgreSQL reads a filter with few rows
    # first and probes its providers for the others; only when every filter
    # has many are they all read and intersected. Whichever drives, the
    # answer is the same on every database.
    members = 3 * providers._FEW
    big, small = A1, A2
    with database.engine.begin() as conn:
        conn.execute(t.resource_providers.insert(), [
            {"id": n, "uuid": str(uuid.UUID(int=n)), "name": f"bulk-{n}", "generation": 0,
             "root_provider_id": n} for n in range(1, members + 2)])
        conn.execute(t.placement_aggregates.insert(), [{"id": 1, "uuid": big},
                                                       {"id": 2, "uuid": small}])
        conn.execute(t.resource_provider_aggregates.insert(), [
            *({"resource_provider_id": n, "aggregate_id": 1} for n in range(1, members + 1)),
            *({"resource_provider_id": n, "aggregate_id": 2} for n in range(1, 11))])
        ids = dict(conn.execute(sa.select(t.traits.c.name, t.traits.c.id).where(
            t.traits.c.name.in_(["MISC_SHARES_VIA_AGGREGATE", "HW_CPU_X86_AVX2"]))).all())
        # Rare: three providers, one outside both aggregates. Common: every
        # other provider.
        conn.execute(t.resource_provider_traits.insert(), [
            *({"resource_provider_id": n, "trait_id": ids["MISC_SHARES_VIA_AGGREGATE"]}
              for n in (5, members - 1, members + 1)),
            *({"resource_provider_id": n, "trait_id": ids["HW_CPU_X86_AVX2"]}
              for n in range(2, members + 2, 2))])
    rare, common = "MISC_SHARES_VIA_AGGREGATE", "HW_CPU_X86_AVX2"
    # The aggregate groups, the trait, the providers found, and the table of
    # the filters that must not be read whole: the aggregates' when the rare
    # trait drives. (A count of a big trait filter stops after _FEW entries
    # only when the planner scans its index in order; a bitmap scan reads the
    # filter whole, as the intersection would.)
    groups, trait, expected, probed = {
        "a rare trait in a big aggregate":
            ([{big}], rare, [5, members - 1], "resource_provider_aggregates"),
        "a common trait in a small aggregate":
            ([{small}], common, [2, 4, 6, 8, 10], None),
        "a common trait in a big aggregate":
            ([{big}], common, list(range(2, members + 1, 2)), None),
        "a rare trait in a big and a small aggregate":
            ([{big}, {small}], rare, [5], "resource_provider_aggregates"),
    }[case]
    query = providers.ProviderQuery(member_of=AggregateFilter(required=groups),
                                    required=TraitFilter(required=[{trait}]))
    with database.engine.connect() as conn, conn.begin():
        pg = database.backend == "postgresql"
        before = conn.execute(_ROWS_FETCHED, {"table": probed}).scalar_one() if pg and probed else 0
        found = providers.list_providers(conn, query)
        if pg and probed:
            read = conn.execute(_ROWS_FETCHED, {"table": probed}).scalar_one() - before
            # A probe per provider with the trait, for each aggregate group:
            # never the aggregates' hundreds of members.
            assert read <= 3 * len(groups), read
    assert [rp.uuid for rp in found] == [str(uuid.UUID(int=n)) for n in expected]
