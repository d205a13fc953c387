"""doc/source/operating/metrics.md lists every metric /metrics exposes, and no
other: its table against a scrape of the application in-process, both ways."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient

PAGE = Path(__file__).parents[1] / "doc" / "source" / "operating" / "metrics.md"


def documented() -> dict[str, str]:
    """Each metric in the page's table and its type."""
    rows = re.findall(r"^\| `([a-z_]+)` \| (counter|gauge|histogram) \|", PAGE.read_text(),
                      flags=re.M)
    return dict(rows)


def test_page_lists_every_exposed_metric(database) -> None:
    # Every family on: the headroom of a named shape comes only with one.
    conf = make_conf(database.url, allotment__metrics=True,
                     allotment__headroom_requests=["m1.small = resources=VCPU:1"])
    client = PlacementClient(make_app(conf, db=database.db, prepare=False))
    client.create_provider("cn-1")
    resp = client.get("/metrics")
    assert resp.status == 200, resp
    exposed = {}
    for family in text_string_to_metric_families(resp.text):
        # The text format names a counter's samples with _total; the page does too.
        name = family.name + "_total" if family.type == "counter" else family.name
        exposed[name] = family.type
    page = documented()
    assert set(exposed) - set(page) == set(), "exposed but not on the page"
    assert set(page) - set(exposed) == set(), "on the page but not exposed"
    assert page == exposed  # and each with its type
