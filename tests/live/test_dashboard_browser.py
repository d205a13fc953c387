"""The dashboard in a real headless browser against a live ``allotment serve``.

Debian's chromium (``/usr/bin/chromium``; ``.ci/run`` installs it) is driven
by Playwright, so no browser is downloaded. A cloud of 361 providers (100
trees of three, one of 61) is made over the API; each page is opened, its numbers compared with
what the API answers, and a screenshot of it saved under
``$ALLOTMENT_TEST_ARTIFACTS`` (default ``test-artifacts/`` in the repository).
The last tests change the cloud as they go: a consumer's timeline (two changes
through the API, one in SQL behind allotment's back), a provider's recent
changes, and the audit's finding of an inventory shrunk under its usage.
Without chromium or Playwright the module is skipped on a developer's machine
and fails in CI (``CI=true``), which must not pass without it.
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from allotment.ledger import capacity
from tests.clients import live
from tests.support.needs import require

CHROMIUM = "/usr/bin/chromium"
TOKEN_KEY = "allotment.dashboard.token"
API = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
TREES = 100
WIDE = 60  # children of "wide-host": more than one answer shows (CHILDREN_SHOWN)
PROJECTS = ["project-a", "project-b", "project-c"]
AGGREGATE = "0d3c4b5a-6e7f-4a8b-9c0d-1e2f3a4b5c6d"
TO = "\u2013"  # the en dash dashboard.js puts between the ends of a page's range


def _missing() -> str | None:
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


require(_missing(), "the dashboard's browser test needs chromium", module=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402


def artifacts() -> Path:
    root = Path(__file__).resolve().parents[2]
    path = Path(os.environ.get("ALLOTMENT_TEST_ARTIFACTS", root / "test-artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Cloud:
    url: str
    session: requests.Session
    database: Path  # the server's SQLite file, for writes behind its back
    roots: dict[str, str] = field(default_factory=dict)  # name -> uuid
    consumers: dict[str, str] = field(default_factory=dict)

    def get(self, path: str) -> dict:
        resp = self.session.get(self.url + path)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def write(self, method: str, path: str, body: object) -> dict | None:
        resp = self.session.request(method, self.url + path, json=body)
        assert resp.status_code in (200, 201, 204), resp.text
        return resp.json() if resp.content else None


def _tree(cloud: Cloud, number: int) -> None:
    """host-NNN (VCPU, MEMORY_MB, DISK_GB) with two NUMA children (PCPU)."""
    name = f"host-{number:03d}"
    root = cloud.write("POST", "/resource_providers", {"name": name})
    assert root is not None
    cloud.roots[name] = root["uuid"]
    gen = cloud.write("PUT", f"/resource_providers/{root['uuid']}/inventories", {
        "resource_provider_generation": 0, "inventories": {
            "VCPU": {"total": 32, "reserved": 2, "allocation_ratio": 2.0},
            "MEMORY_MB": {"total": 131072, "reserved": 2048, "allocation_ratio": 1.0},
            "DISK_GB": {"total": 1000 + 10 * number}}})["resource_provider_generation"]
    if number % 3 == 0:
        gen = cloud.write("PUT", f"/resource_providers/{root['uuid']}/traits", {
            "resource_provider_generation": gen,
            "traits": ["CUSTOM_FAST", "HW_CPU_X86_AVX2"]})["resource_provider_generation"]
    if number % 2 == 0:
        cloud.write("PUT", f"/resource_providers/{root['uuid']}/aggregates", {
            "resource_provider_generation": gen, "aggregates": [AGGREGATE]})
    for numa in (0, 1):
        child = cloud.write("POST", "/resource_providers", {
            "name": f"{name}-numa{numa}", "parent_provider_uuid": root["uuid"]})
        assert child is not None
        cloud.write("PUT", f"/resource_providers/{child['uuid']}/inventories", {
            "resource_provider_generation": 0, "inventories": {"PCPU": {"total": 8}}})


def _wide_tree(cloud: Cloud) -> None:
    root = cloud.write("POST", "/resource_providers", {"name": "wide-host"})
    assert root is not None
    cloud.roots["wide-host"] = root["uuid"]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: cloud.write("POST", "/resource_providers", {
            "name": f"wide-host-vf{n:02d}", "parent_provider_uuid": root["uuid"]}), range(WIDE)))


def _allocate(cloud: Cloud, number: int) -> None:
    """Consumer vm-NNN on host-NNN: more VCPU the higher the number; host-099 full."""
    consumer = str(uuid.uuid4())
    cloud.consumers[f"vm-{number:03d}"] = consumer
    vcpu = 60 if number == 99 else 1 + number % 40
    cloud.write("PUT", f"/allocations/{consumer}", {
        "allocations": {cloud.roots[f"host-{number:03d}"]: {
            "resources": {"VCPU": vcpu, "MEMORY_MB": 1024 * (1 + number % 8)}}},
        "project_id": PROJECTS[number % 3], "user_id": "user-1",
        "consumer_generation": None,
        "consumer_type": "MIGRATION" if number % 10 == 0 else "INSTANCE"})


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    workdir = tmp_path_factory.mktemp("dashboard")
    server = live.start(workdir, extra_conf="[allotment]\ndashboard = True\n")
    session = requests.Session()
    session.headers.update(API)
    made = Cloud(server.url, session, workdir / "placement.sqlite")
    try:
        made.write("PUT", "/traits/CUSTOM_FAST", None)
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda n: _tree(made, n), range(TREES)))
            list(pool.map(lambda n: _allocate(made, n), range(0, TREES, 2)))
            list(pool.map(lambda n: _allocate(made, n), [99]))
        _wide_tree(made)
        yield made
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


def _open(browser: Browser, cloud: Cloud, page_hash: str, token: str | None = "admin",
          roles: str | None = None) -> Page:
    """A new tab (its own sessionStorage), signed in with ``token`` unless None;
    ``roles``: noauth2's X-Roles on every request (a reader, say)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860},
                                  extra_http_headers={"X-Roles": roles} if roles else None)
    if token is not None:
        context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, {token!r})")
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.errors = errors  # type: ignore[attr-defined]
    page.goto(f"{cloud.url}/dashboard{page_hash}")
    return page


def _shot(page: Page, name: str, full_page: bool = True) -> None:
    page.screenshot(path=str(artifacts() / f"dashboard-{name}.png"), full_page=full_page)
    assert page.errors == [], page.errors  # type: ignore[attr-defined]


def _bars(page: Page, selector: str) -> dict[str, dict[str, int]]:
    return page.eval_on_selector_all(
        f"{selector} > .details > .inv",
        "bars => Object.fromEntries(bars.map(b => [b.dataset.rc, "
        "{used: +b.dataset.used, capacity: +b.dataset.capacity, total: +b.dataset.total, "
        "reserved: +b.dataset.reserved}]))")


def _expected_bars(cloud: Cloud, rp_uuid: str) -> dict[str, dict[str, int]]:
    inventories = cloud.get(f"/resource_providers/{rp_uuid}/inventories")["inventories"]
    used = cloud.get(f"/resource_providers/{rp_uuid}/usages")["usages"]
    return {rc: {"used": used[rc], "total": rec["total"], "reserved": rec["reserved"],
                 "capacity": capacity.capacity(rec["total"], rec["reserved"],
                                               rec["allocation_ratio"])}
            for rc, rec in inventories.items()}


# -- the pages ------------------------------------------------------------------

def test_token_prompt(browser, cloud):
    page = _open(browser, cloud, "", token=None)
    expect(page.locator("#login")).to_be_visible()
    expect(page.locator("#login-hint")).to_contain_text("noauth2")
    expect(page.locator("#nav")).to_be_hidden()
    _shot(page, "sign-in")
    page.fill("#token", "admin")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#trees > .node").first).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") == "admin"
    page.reload()  # the token stays with the tab
    expect(page.locator("#trees > .node").first).to_be_visible()
    page.click("#sign-out")
    expect(page.locator("#login")).to_be_visible()
    assert page.evaluate(f"sessionStorage.getItem({TOKEN_KEY!r})") is None
    # A token the policy does not let list providers: "Not allowed", and no page.
    page.fill("#token", "nobody")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#forbidden")).to_contain_text("Not allowed (403)")
    expect(page.locator("#forbidden")).to_contain_text("allotment:dashboard:providers")
    expect(page.locator("#page-providers")).to_be_hidden()
    _shot(page, "not-allowed")
    page.context.close()


def test_project_reader_sees_its_own_project_alone(browser, cloud):
    """A project reader: the usage of its own project, "Not allowed" in place of the
    cloud-wide parts, and nothing an admin saw before in the same tab."""
    page = _open(browser, cloud, "#usage", token=None)
    page.fill("#token", "admin")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#projects tbody tr[data-project]")).to_have_count(len(PROJECTS))
    expect(page.locator("#totals tbody tr[data-rc]").first).to_be_visible()
    page.click("#sign-out")
    page.context.set_extra_http_headers({"X-Roles": "reader"})
    page.fill("#token", f"watcher:{PROJECTS[0]}")
    page.click("#login-form button[type=submit]")
    expect(page.locator("#projects tbody tr[data-project]")).to_have_count(1)
    expect(page.locator("#projects tbody tr").first).to_have_attribute(
        "data-project", PROJECTS[0])
    api: dict[str, int] = {}
    for per_type in cloud.get(f"/usages?project_id={PROJECTS[0]}")["usages"].values():
        for rc, value in per_type.items():
            if rc != "consumer_count":
                api[rc] = api.get(rc, 0) + value
    amounts = page.locator("#projects tbody tr .amount")
    shown = dict(zip(amounts.evaluate_all("a => a.map(x => x.dataset.rc)"),
                     amounts.evaluate_all("a => a.map(x => +x.dataset.used)"), strict=True))
    assert shown == api
    summary = page.locator("#usage-summary .denied")
    expect(summary).to_contain_text("Not allowed (403)")
    expect(summary).to_contain_text("allotment:dashboard:providers")
    expect(page.locator("#usage-types .denied")).to_contain_text("allotment:dashboard:usages")
    expect(page.locator("#totals tr")).to_have_count(0)
    expect(page.locator("#types tr")).to_have_count(0)
    for other in PROJECTS[1:]:
        expect(page.locator(f"[data-project='{other}']")).to_have_count(0)
    _shot(page, "usage-project-reader")
    page.goto(f"{cloud.url}/dashboard#providers")
    expect(page.locator("#forbidden")).to_contain_text("allotment:dashboard:providers")
    expect(page.locator("#trees .node")).to_have_count(0)
    page.context.close()


def test_providers_page(browser, cloud):
    page = _open(browser, cloud, "#providers")
    expect(page.locator("#trees-info")).to_have_text(f"trees 1{TO}50 of {TREES + 1}")
    names = page.locator("#trees > .node > .row .name").all_inner_texts()
    assert names == [f"host-{n:03d}" for n in range(50)]
    first = f"#trees > .node[data-uuid='{cloud.roots['host-000']}']"
    assert _bars(page, first) == _expected_bars(cloud, cloud.roots["host-000"])
    expect(page.locator(f"{first} > .details .traits")).to_contain_text("CUSTOM_FAST")
    expect(page.locator(f"{first} > .details .aggregates")).to_contain_text(AGGREGATE)
    # Expand and collapse one tree: its children appear with their inventories.
    children = page.locator(f"{first} > .children")
    expect(children).to_be_hidden()
    page.click(f"{first} > .row .toggle")
    expect(children).to_be_visible()
    assert page.locator(f"{first} > .row .toggle").get_attribute("aria-expanded") == "true"
    assert children.locator(":scope > .node > .row .name").all_inner_texts() == [
        "host-000-numa0", "host-000-numa1"]
    child = cloud.get("/resource_providers?name=host-000-numa0")["resource_providers"][0]
    assert _bars(page, f"{first} > .children > .node[data-uuid='{child['uuid']}']") == \
        _expected_bars(cloud, child["uuid"])
    _shot(page, "providers", full_page=False)  # the first screen: the page is 50 trees long
    page.click(f"{first} > .row .toggle")
    expect(children).to_be_hidden()
    page.click("#expand-all")
    expect(page.locator("#trees .children:visible")).to_have_count(50)
    page.click("#collapse-all")
    expect(page.locator("#trees .children:visible")).to_have_count(0)
    # The next page, then a search.
    page.click("#trees-next")
    expect(page.locator("#trees-info")).to_have_text(f"trees 51{TO}100 of {TREES + 1}")
    expect(page.locator("#trees > .node > .row .name").first).to_have_text("host-050")
    page.click("#trees-next")
    expect(page.locator("#trees-info")).to_have_text(f"trees 101{TO}101 of {TREES + 1}")
    expect(page.locator("#trees-next")).to_be_disabled()
    # A tree wider than one answer: the rest of its children come on demand.
    wide = f"#trees > .node[data-uuid='{cloud.roots['wide-host']}']"
    expect(page.locator(f"{wide} > .row .kids")).to_have_text(f"{WIDE} children")
    page.click(f"{wide} > .row .toggle")
    shown = page.locator(f"{wide} > .children > .node")
    expect(shown).to_have_count(50)
    page.click(f"{wide} > .children > button.more")
    expect(shown).to_have_count(WIDE)
    expect(page.locator(f"{wide} > .children > button.more")).to_have_count(0)
    assert shown.locator(":scope > .row .name").all_inner_texts() == [
        f"wide-host-vf{n:02d}" for n in range(WIDE)]
    page.fill("#provider-q", "HOST-042-NUMA1")
    page.press("#provider-q", "Enter")
    expect(page.locator("#trees-info")).to_have_text(f"trees 1{TO}1 of 1")
    expect(page.locator("#trees > .node > .row .name")).to_have_text("host-042")
    page.context.close()


def test_usage_page(browser, cloud):
    page = _open(browser, cloud, "#usage")
    expect(page.locator("#projects tbody tr[data-project]")).to_have_count(len(PROJECTS))
    expect(page.locator("#types tbody tr[data-type]")).to_have_count(2)
    # Totals per class: the sums of every provider's inventories and usages.
    totals: dict[str, list[int]] = {}
    for rp in cloud.get("/resource_providers")["resource_providers"]:
        for rc, bar in _expected_bars(cloud, rp["uuid"]).items():
            entry = totals.setdefault(rc, [0, 0, 0, 0, 0])
            for position, key in enumerate(("used", "capacity", "total", "reserved")):
                entry[position] += bar[key]
            entry[4] += 1  # providers
    # The summary comes in its own request: wait for it before reading it.
    expect(page.locator("#totals tbody tr[data-rc]")).to_have_count(len(totals))
    expect(page.locator("#counts .count")).to_have_count(3)
    shown = page.eval_on_selector_all(
        "#totals tbody tr[data-rc]",
        "rows => Object.fromEntries(rows.map(r => [r.dataset.rc, "
        "[...r.querySelectorAll('td.num')].map(td => +td.textContent.replace(/,/g, ''))]))")
    assert shown == totals
    counts = page.locator("#counts .count strong").all_inner_texts()
    assert counts == [str(3 * TREES + 1 + WIDE), str(TREES + 1), str(len(cloud.consumers))]
    # host-099 is the fullest (60 of 60 VCPU).
    expect(page.locator("#fullest tbody tr").first).to_have_attribute(
        "data-uuid", cloud.roots["host-099"])
    expect(page.locator("#fullest tbody tr").first).to_contain_text("100.0 %")
    # Per project and per consumer type: what GET /usages answers.
    by_type: dict[str, dict[str, int]] = {}
    for project in PROJECTS:
        api = cloud.get(f"/usages?project_id={project}")["usages"]
        row = page.locator(f"#projects tr[data-project='{project}']")
        amounts = row.locator(".amount")
        shown_amounts = dict(zip(amounts.evaluate_all("a => a.map(x => x.dataset.rc)"),
                                 amounts.evaluate_all("a => a.map(x => +x.dataset.used)"),
                                 strict=True))
        merged: dict[str, int] = {}
        for type_name, per_type in api.items():
            for key, value in per_type.items():
                by_type.setdefault(type_name, {}).setdefault(key, 0)
                by_type[type_name][key] += value
                if key != "consumer_count":
                    merged[key] = merged.get(key, 0) + value
        assert shown_amounts == merged
    for type_name, expected in by_type.items():
        row = page.locator(f"#types tr[data-type='{type_name}']")
        expect(row.locator("td.num")).to_have_text(str(expected.pop("consumer_count")))
        for rc, value in expected.items():
            expect(row.locator(f".amount[data-rc='{rc}']")).to_have_attribute(
                "data-used", str(value))
    _shot(page, "usage")
    page.context.close()


def test_consumer_page(browser, cloud):
    page = _open(browser, cloud, "#consumer")
    consumer = cloud.consumers["vm-042"]
    page.fill("#consumer-uuid", consumer)
    page.press("#consumer-uuid", "Enter")
    rows = page.locator("#consumer-allocations tbody tr")
    expect(rows).to_have_count(2)
    api = cloud.get(f"/allocations/{consumer}")
    shown = rows.evaluate_all("rows => rows.map(r => [r.dataset.provider, r.dataset.rc, "
                              "+r.dataset.used])")
    assert sorted(map(tuple, shown)) == sorted(
        (rp, rc, n) for rp, entry in api["allocations"].items()
        for rc, n in entry["resources"].items())
    expect(page.locator("#consumer-result .facts")).to_contain_text(api["project_id"])
    expect(rows.first).to_contain_text("host-042")
    _shot(page, "consumer")
    page.context.close()


def test_what_fits(browser, cloud):
    explain = cloud.session.get(cloud.url + "/explain/allocation_candidates?resources=VCPU:1")
    query = "resources=VCPU:25,MEMORY_MB:1024&required=CUSTOM_FAST"
    candidates = cloud.get(f"/allocation_candidates?{query}")
    qualified = {candidates["provider_summaries"][rp]["root_provider_uuid"]
                 for request in candidates["allocation_requests"]
                 for rp in request["allocations"]}
    # CUSTOM_FAST on every third host (34); of them host-036, -078 and -099 lack
    # 25 VCPU free.
    assert len(qualified) == 31
    page = _open(browser, cloud, "#fits")
    page.fill("#fit-resources", "VCPU:25,MEMORY_MB:1024")
    page.fill("#fit-required", "CUSTOM_FAST")
    page.fill("#fit-limit", "200")
    page.click("#fits-form button[type=submit]")
    hosts = page.locator("#fit-qualified > li.host")
    expect(hosts).to_have_count(len(qualified))
    assert set(hosts.evaluate_all("hs => hs.map(h => h.dataset.uuid)")) == qualified
    expect(hosts.first.locator(".inv[data-rc='VCPU']")).to_be_visible()
    if explain.status_code == 404:
        expect(page.locator("#fit-no-explain")).to_be_visible()
        expect(page.locator("#fit-summary")).to_have_attribute(
            "data-qualified", str(len(qualified)))
    else:
        assert explain.status_code == 200, explain.text
        summary = page.locator("#fit-summary")
        expect(summary).to_have_attribute("data-total", str(TREES + 1))
        expect(summary).to_have_attribute("data-qualified", str(len(qualified)))
        # The reasons shown are the endpoint's, for the whole cloud and per excluded host.
        explained = cloud.get(f"/explain/allocation_candidates?{query}&explain_limit=200")
        explanation = explained["explanation"]
        reasons = page.locator("#fit-reasons tbody tr")
        assert reasons.evaluate_all("rows => rows.map(r => [r.dataset.filter, "
                                    "+r.querySelector('td.num').textContent])") == [
            [r["filter"], r["trees"]] for r in explanation["reasons"]]
        excluded = {host["root_provider_uuid"]: host for host in explanation["excluded"]}
        assert len(excluded) == TREES + 1 - len(qualified)
        expect(page.locator("#fit-excluded > li.host")).to_have_count(len(excluded))
        for host_uuid, host in excluded.items():
            items = page.locator(f"#fit-excluded li.host[data-uuid='{host_uuid}'] li")
            assert items.evaluate_all("li => li.map(x => x.dataset.filter)") == [
                r["filter"] for r in host["reasons"]]
            for item, reason in zip(items.all(), host["reasons"], strict=True):
                expect(item).to_contain_text(reason["detail"])
        # And they are the right ones: host-001 lacks the trait; host-078 has it,
        # but holds 39 of its 60 VCPU.
        lacking = excluded[cloud.roots["host-001"]]["reasons"]
        assert [r["filter"] for r in lacking] == ["required_trait"]
        assert "CUSTOM_FAST" in lacking[0]["detail"]
        full = excluded[cloud.roots["host-078"]]["reasons"]
        assert [(r["filter"], r["resource_class"]) for r in full] == [("capacity", "VCPU")]
        assert cloud.roots["host-078"] not in qualified
    # Beside them, GET /headroom's count for the same query.
    room = cloud.get(f"/headroom?{query}")
    expect(page.locator("#fit-headroom")).to_have_attribute("data-total", str(room["total"]))
    _shot(page, "what-fits")
    page.context.close()


def test_what_fits_headroom(browser, cloud):
    """The box's headroom is GET /headroom's for its query: the total, whether it is
    exact, the five roots with the most room and the count per aggregate."""
    query = f"resources=VCPU:4,MEMORY_MB:8192&member_of={AGGREGATE}"
    room = cloud.get(f"/headroom?{query}&limit=5")
    # The 50 even hosts are in the aggregate, so all that fit fit in it.
    assert room["optimal"] and room["total"] > 0
    assert room["aggregates"] == {AGGREGATE: room["total"]}
    page = _open(browser, cloud, "#fits")
    page.fill("#fit-resources", "VCPU:4,MEMORY_MB:8192")
    page.fill("#fit-member-of", AGGREGATE)
    page.fill("#fit-limit", "5")
    page.click("#fits-form button[type=submit]")
    box = page.locator("#fit-headroom")
    expect(box).to_have_attribute("data-total", str(room["total"]))
    expect(box).to_have_attribute("data-optimal", "true")
    expect(box.locator(".summary")).to_have_text(f"{room['total']:,} more fit (exact)")
    roots = box.locator("#fit-headroom-roots > li")
    expect(roots).to_have_count(5)
    assert roots.evaluate_all("li => li.map(x => [x.dataset.uuid, +x.dataset.count])") == [
        [root["uuid"], root["count"]] for root in room["roots"]]
    expect(roots.first).to_contain_text(room["roots"][0]["name"])
    aggregates = box.locator("#fit-headroom-aggregates > li")
    assert aggregates.evaluate_all("li => li.map(x => [x.dataset.uuid, +x.dataset.count])") == [
        [AGGREGATE, room["total"]]]
    expect(page.locator("#fit-qualified > li.host")).to_have_count(50)
    _shot(page, "headroom", full_page=False)
    page.context.close()


# -- history: a consumer's timeline, a provider's recent changes --------------------

def _outside_write(cloud: Cloud, sql: str, params: tuple) -> None:
    """A write in SQL, not through allotment: the history records it as ``outside``."""
    db = sqlite3.connect(cloud.database, timeout=30)
    try:
        with db:
            assert db.execute(sql, params).rowcount == 1
    finally:
        db.close()


def _timeline(page: Page, selector: str = "#consumer-timeline") -> list[tuple]:
    return [tuple(row) for row in page.locator(f"{selector} tbody tr").evaluate_all(
        "rows => rows.map(r => [r.dataset.provider, r.dataset.rc, +r.dataset.before, "
        "+r.dataset.after, r.dataset.writer, "
        "r.querySelector('.badge').textContent])")]


def _moved_consumer(cloud: Cloud) -> str:
    """vm-moved: made on host-001, grown there, moved to host-005 (through the API), then
    grown again in SQL. Made once; the timeline and the audit tests share it."""
    if "vm-moved" in cloud.consumers:
        return cloud.consumers["vm-moved"]
    consumer = str(uuid.uuid4())
    first, second = cloud.roots["host-001"], cloud.roots["host-005"]
    owner = {"project_id": "project-t", "user_id": "user-t", "consumer_type": "INSTANCE"}
    cloud.write("PUT", f"/allocations/{consumer}", {
        "allocations": {first: {"resources": {"VCPU": 2, "MEMORY_MB": 2048}}},
        "consumer_generation": None, **owner})
    cloud.write("PUT", f"/allocations/{consumer}", {
        "allocations": {first: {"resources": {"VCPU": 4, "MEMORY_MB": 2048}}},
        "consumer_generation": 1, **owner})
    resp = cloud.session.put(cloud.url + f"/allocations/{consumer}", json={
        "allocations": {second: {"resources": {"VCPU": 4, "MEMORY_MB": 4096}}},
        "consumer_generation": 2, **owner},
        headers={"X-OpenStack-Request-ID": GLOBAL_REQUEST_ID})
    assert resp.status_code == 204, resp.text
    _outside_write(cloud, "UPDATE allocations SET used = 6 WHERE consumer_id = ? AND "
                   "resource_provider_id = (SELECT id FROM resource_providers WHERE uuid = ?) "
                   "AND used = 4", (consumer, second))
    cloud.consumers["vm-moved"] = consumer
    return consumer


GLOBAL_REQUEST_ID = "req-0b7e2d3c-5a4f-4e8d-9c1b-2a3f4e5d6c7b"


def test_consumer_timeline(browser, cloud):
    consumer = _moved_consumer(cloud)
    first, second = cloud.roots["host-001"], cloud.roots["host-005"]
    api = cloud.get(f"/history/allocations?consumer_uuid={consumer}")
    assert api["next_marker"] is None
    page = _open(browser, cloud, "#consumer")
    page.fill("#consumer-uuid", consumer)
    page.press("#consumer-uuid", "Enter")
    rows = page.locator("#consumer-timeline tbody tr")
    expect(rows).to_have_count(len(api["entries"]))
    # The entries the API gives, in its order (newest first), each with its writer.
    shown = _timeline(page)
    assert shown == [(e["resource_provider_uuid"], e["resource_class"], e["used_before"],
                      e["used_after"], e["writer"], e["writer"]) for e in api["entries"]]
    assert page.evaluate("location.hash") == f"#consumer?uuid={consumer}"
    # And they are the right ones: newest first, the write in SQL (outside, no request
    # id), the move, the growth on host-001, the claim. Within a change, by provider
    # and class.
    def change(rows: list[tuple]) -> list[tuple]:
        return sorted(row[:5] for row in rows)
    assert shown[0][:5] == (second, "VCPU", 4, 6, "outside")
    moved = [row for row in shown[1:] if row[4] == "allotment"]
    assert change(moved[:4]) == change([
        (first, "MEMORY_MB", 2048, 0, "allotment"), (first, "VCPU", 4, 0, "allotment"),
        (second, "MEMORY_MB", 0, 4096, "allotment"), (second, "VCPU", 0, 4, "allotment")])
    grown = [row for row in moved[4:] if row[2] != row[3]]
    assert grown[0][:5] == (first, "VCPU", 2, 4, "allotment")
    assert change(moved[-2:]) == change([(first, "MEMORY_MB", 0, 2048, "allotment"),
                                          (first, "VCPU", 0, 2, "allotment")])
    outside = rows.first
    expect(outside.locator(".badge")).to_have_class("badge writer-outside")
    expect(outside.locator("td.ids")).to_have_text("—")
    expect(outside.locator("td.change")).to_have_text("4 \u2192 6 +2")
    expect(outside).to_contain_text("host-005")
    # The move carries the caller's global request id.
    expect(rows.nth(1).locator("td.ids")).to_contain_text(GLOBAL_REQUEST_ID)
    expect(rows.nth(1).locator(".badge")).to_have_class("badge writer-allotment")
    # What it holds now: the SQL write included.
    expect(page.locator("#consumer-allocations tbody tr[data-rc='VCPU']")).to_have_attribute(
        "data-used", "6")
    _shot(page, "timeline")
    # A provider of the timeline links to it: its tree, with its recent changes open.
    outside.locator(f"a[data-uuid='{second}']").click()
    focused = page.locator(f"#trees > .node.focus[data-uuid='{second}']")
    expect(focused).to_be_visible()
    assert page.evaluate("location.hash") == f"#providers?uuid={second}"
    changes = focused.locator(":scope > .changes")
    expect(changes).to_be_visible()
    inventories = changes.locator(".recent-inventories tbody tr")
    expect(inventories).to_have_count(3)  # VCPU, MEMORY_MB, DISK_GB created
    for rc in ("VCPU", "MEMORY_MB", "DISK_GB"):
        expect(inventories.locator(f"xpath=self::tr[@data-rc='{rc}']")).to_contain_text(
            "created")
    held = changes.locator(f".recent-allocations tbody tr[data-consumer='{consumer}']")
    expect(held).to_have_count(3)  # the move's two, the write in SQL
    _shot(page, "recent-changes")
    # ... and its consumers link back to their timeline.
    held.first.locator("a.consumer-link").click()
    expect(page.locator("#consumer-timeline tbody tr")).to_have_count(len(api["entries"]))
    assert page.evaluate("location.hash") == f"#consumer?uuid={consumer}"
    page.context.close()


def test_timeline_pages_back(browser, cloud):
    """More changes than one request brings: "Older changes" asks for the next page."""
    consumer = str(uuid.uuid4())
    host = cloud.roots["host-007"]
    owner = {"project_id": "project-t", "user_id": "user-t", "consumer_type": "INSTANCE"}
    for generation in range(25):
        cloud.write("PUT", f"/allocations/{consumer}", {
            "allocations": {host: {"resources": {"VCPU": 1 + generation}}},
            "consumer_generation": generation or None, **owner})
    cloud.consumers["vm-busy"] = consumer
    entries = cloud.get(f"/history/allocations?consumer_uuid={consumer}&limit=100")["entries"]
    assert len(entries) == 25
    page = _open(browser, cloud, f"#consumer?uuid={consumer}")
    rows = page.locator("#consumer-timeline tbody tr")
    expect(rows).to_have_count(20)
    expect(page.locator("#consumer-timeline .info")).to_have_text(
        "20 changes, older ones remain")
    page.click("#consumer-timeline button.older")
    expect(rows).to_have_count(25)
    expect(page.locator("#consumer-timeline button.older")).to_be_hidden()
    assert [row[2:4] for row in _timeline(page)] == [
        (e["used_before"], e["used_after"]) for e in entries]
    assert _timeline(page)[-1][2:4] == (0, 1)
    page.context.close()


def test_history_needs_admin(browser, cloud):
    """A service may read consumers and providers, but the history is admin-only: the
    timeline and the recent changes say so, and the rest of the page stands."""
    consumer = _moved_consumer(cloud)
    page = _open(browser, cloud, f"#consumer?uuid={consumer}", token="watcher:project-r",
                 roles="service")
    expect(page.locator("#consumer-allocations tbody tr")).to_have_count(2)
    refused = page.locator("#consumer-timeline .denied")
    expect(refused).to_contain_text("Not allowed to read the consumer's timeline (403)")
    expect(refused).to_contain_text("allotment:history:allocations")
    expect(page.locator("#error")).to_be_hidden()
    page.goto(f"{cloud.url}/dashboard#providers?uuid={cloud.roots['host-005']}")
    changes = page.locator("#trees .node.focus > .changes")
    expect(changes.locator(".denied")).to_have_count(2)
    expect(changes.locator(".recent-inventories .denied")).to_contain_text(
        "allotment:history:inventories")
    assert page.errors == []  # type: ignore[attr-defined]
    page.context.close()


# -- the audit ------------------------------------------------------------------------

def _set_ratio(cloud: Cloud, rp_uuid: str, rc: str, ratio: float) -> None:
    current = cloud.get(f"/resource_providers/{rp_uuid}/inventories/{rc}")
    cloud.write("PUT", f"/resource_providers/{rp_uuid}/inventories/{rc}", {
        **{key: current[key] for key in ("resource_provider_generation", "total", "reserved",
                                         "min_unit", "max_unit", "step_size")},
        "allocation_ratio": ratio})


def test_audit_page(browser, cloud):
    """Two findings made for real: host-005's VCPU shrunk under vm-moved's usage through
    the API (over_capacity), a consumer record without allocations left in SQL
    (empty_consumer). Each is shown with its evidence and history, and links to the
    provider and the consumers."""
    consumer = _moved_consumer(cloud)  # 6 VCPU on host-005
    host = cloud.roots["host-005"]
    empty = str(uuid.uuid4())
    _set_ratio(cloud, host, "VCPU", 0.1)  # capacity (32 - 2) x 0.1 = 3
    _outside_write(cloud, "INSERT INTO consumers (uuid, project_id, user_id, generation, "
                   "created_at) SELECT ?, project_id, user_id, 0, CURRENT_TIMESTAMP "
                   "FROM consumers WHERE uuid = ?", (empty, consumer))
    try:
        report = cloud.get("/audit/allocations")
        assert report["counts"]["over_capacity"] == 1, report
        assert report["counts"]["empty_consumer"] == 1, report
        over = next(f for f in report["findings"] if f["kind"] == "over_capacity")
        assert (over["resource_provider_uuid"], over["resource_class"]) == (host, "VCPU")
        page = _open(browser, cloud, "#audit")
        cards = page.locator("#audit-counts .count")
        expect(cards).to_have_count(len(report["counts"]))
        assert cards.evaluate_all("cs => cs.map(c => [c.dataset.kind, +c.dataset.count])") \
            == list(map(list, report["counts"].items()))
        groups = page.locator("#audit-result .audit-kind")
        expect(groups).to_have_count(2)
        assert groups.evaluate_all("gs => gs.map(g => g.dataset.kind)") == [
            "over_capacity", "empty_consumer"]
        shown = page.locator(f".audit-kind[data-kind='over_capacity'] "
                             f".finding[data-provider='{host}']")
        expect(shown.locator(".finding-summary")).to_have_text(over["summary"])
        expect(shown.locator(".evidence[data-key='used']")).to_have_text("6")
        expect(shown.locator(".evidence[data-key='capacity']")).to_have_text("3")
        expect(shown.locator(".finding-provider")).to_have_text("host-005")
        # Its history: the ratio lowered, and the consumer's VCPU on the provider.
        past = shown.locator(".finding-history")
        expect(past).to_have_attribute("open", "")
        lowered = past.locator(f"tbody tr[data-provider='{host}'][data-rc='VCPU']"
                               "[data-total-before]").first
        expect(lowered).to_contain_text("2 \u2192 0.1")
        expect(past.locator(f"a.consumer-link[data-consumer='{consumer}']").first).to_be_visible()
        lonely = page.locator(f".audit-kind[data-kind='empty_consumer'] "
                              f".finding[data-consumer='{empty}']")
        expect(lonely).to_contain_text("project-t")
        _shot(page, "audit")
        # The provider's link: its tree, its recent changes with the lowered ratio.
        shown.locator(".finding-provider a").click()
        focused = page.locator(f"#trees > .node.focus[data-uuid='{host}']")
        expect(focused.locator(".recent-inventories tbody tr").first).to_contain_text(
            "2 \u2192 0.1")
        page.go_back()
        # A consumer in its history: that consumer's timeline.
        past.locator(f"a.consumer-link[data-consumer='{consumer}']").first.click()
        expect(page.locator("#consumer-timeline tbody tr").first).to_have_attribute(
            "data-writer", "outside")
        assert page.evaluate("location.hash") == f"#consumer?uuid={consumer}"
        # One kind only.
        page.goto(f"{cloud.url}/dashboard#audit")
        expect(groups).to_have_count(2)
        page.select_option("#audit-kind", "empty_consumer")
        page.click("#audit-form button[type=submit]")
        expect(groups).to_have_count(1)
        expect(groups.first).to_have_attribute("data-kind", "empty_consumer")
        assert page.errors == []  # type: ignore[attr-defined]
        page.context.close()
        # A service may see the dashboard but not the audit.
        page = _open(browser, cloud, "#audit", token="watcher:project-r", roles="service")
        refused = page.locator("#audit-refused")
        expect(refused).to_contain_text("Not allowed to run the audit (403)")
        expect(refused).to_contain_text("allotment:audit:allocations")
        page.context.close()
    finally:
        _outside_write(cloud, "DELETE FROM consumers WHERE uuid = ?", (empty,))
        _set_ratio(cloud, host, "VCPU", 2.0)
