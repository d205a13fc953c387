"""openstacksdk's own placement functional tests against a live ``allotment serve``.

The tests are upstream's, unchanged: ``openstack/tests/functional/placement`` of
the installed openstacksdk (its wheel ships ``openstack/tests``), or, where the
installed copy lacks them or ``ALLOTMENT_OPENSTACKSDK_TESTS=sdist`` asks for it,
of the same version's sdist from PyPI (``pip download``), unpacked once under
``tests/clients/.cache/`` (gitignored). They run in a child ``python -m pytest``
because ``base.py`` reads clouds.yaml at import time.

What is ours: the clouds.yaml (``auth_type: admin_token``, token ``admin``, the
server as endpoint and ``placement_endpoint_override``, no compute or image
service), a provider with VCPU/MEMORY_MB/DISK_GB inventory like devstack's compute
node (``test_allocation_candidate`` asks for ``VCPU:1`` on a cloud it takes to have
one), and ``tests/clients/openstacksdk_shim.py`` for the caller's user and project
ids, which admin_token auth cannot give (see there).

Run alone: ``ALLOTMENT_TEST_DATABASES=sqlite .venv/bin/pytest -m clients
tests/clients/test_openstacksdk.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.clients import live, upstream_suite

pytestmark = pytest.mark.clients

SUITE = upstream_suite.Suite(
    distribution="openstacksdk", package="openstack",
    subdir=Path("openstack", "tests", "functional", "placement"), marker="v1",
    source_variable="ALLOTMENT_OPENSTACKSDK_TESTS", shim="tests.clients.openstacksdk_shim")
CLOUD = "allotment"
TOKEN = "admin"
# noauth2 takes the caller from the token, "user[:project]"; so does openstacksdk_shim.
USER_ID = PROJECT_ID = TOKEN
# openstacksdk 4.22.0 has 8 placement functional tests; fewer means something went missing.
MIN_TESTS = 8
# The clouds base.py opens; all are the one admin cloud here.
CLOUD_VARIABLES = ("OS_CLOUD", "OPENSTACKSDK_DEMO_CLOUD", "OPENSTACKSDK_DEMO_CLOUD_ALT",
                   "OPENSTACKSDK_OPERATOR_CLOUD", "OPENSTACKSDK_SYSTEM_ADMIN_CLOUD")


def seed_cloud(url: str) -> None:
    """What a devstack cloud has before the tests: a compute node running one server.

    test_allocation_candidate asks for ``VCPU:1`` and wants a candidate. test_usage
    lists the caller's project's usages at microversion 1.38 and wants each entry to
    have a consumer type; on a project with no allocations the answer is
    ``{"usages": {}}`` (upstream's too), which openstacksdk turns into one Usage
    without a consumer type, so the test needs a consumer of the caller's.
    """
    session = requests.Session()
    session.headers.update({"X-Auth-Token": TOKEN, "OpenStack-API-Version": "placement 1.38",
                            "Connection": "close"})
    response = session.post(f"{url}/resource_providers", json={"name": "compute-0"},
                            timeout=30)
    response.raise_for_status()
    provider = response.json()
    response = session.put(
        f"{url}/resource_providers/{provider['uuid']}/inventories",
        json={"resource_provider_generation": provider["generation"],
              "inventories": {"VCPU": {"total": 8},
                              "MEMORY_MB": {"total": 16384, "reserved": 512},
                              "DISK_GB": {"total": 100}}},
        timeout=30)
    response.raise_for_status()
    response = session.put(
        f"{url}/allocations/{uuid.uuid4()}",
        json={"allocations": {provider["uuid"]: {
                  "resources": {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}}},
              "project_id": PROJECT_ID, "user_id": USER_ID,
              "consumer_generation": None, "consumer_type": "INSTANCE"},
        timeout=30)
    response.raise_for_status()


def write_clouds_yaml(path: Path, url: str) -> None:
    path.write_text(
        "clouds:\n"
        f"  {CLOUD}:\n"
        "    auth_type: admin_token\n"
        "    auth:\n"
        f"      token: {TOKEN}\n"
        f"      endpoint: {url}\n"
        f"    placement_endpoint_override: {url}\n"
        "    has_compute: false\n"
        "    has_image: false\n")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[live.LiveServer]:
    process = live.start(tmp_path_factory.mktemp("openstacksdk-server"))
    try:
        seed_cloud(process.url)
        yield process
    finally:
        process.stop()


def test_openstacksdk_placement_functional(server: live.LiveServer, tmp_path: Path) -> None:
    tmp_path.mkdir(parents=True, exist_ok=True)
    clouds = tmp_path / "clouds.yaml"
    write_clouds_yaml(clouds, server.url)
    outcome = upstream_suite.run(SUITE, tmp_path, {
        **{name: CLOUD for name in CLOUD_VARIABLES},
        "OS_CLIENT_CONFIG_FILE": str(clouds),
    })
    upstream_suite.check(SUITE, outcome, server, MIN_TESTS)
