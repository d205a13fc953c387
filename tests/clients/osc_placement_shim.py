"""A pytest plugin that points osc-placement's functional tests at a live allotment.

osc-placement's ``osc_placement/tests/functional/base.py`` imports two fixtures
from upstream placement's own test tree::

    from placement.tests.functional.fixtures import capture
    from placement.tests.functional.fixtures import placement

and uses them as ``capture.Logging()`` (logs kept off stderr) and
``placement.PlacementFixture()``, from which it reads ``.endpoint`` and
``.token`` and then runs the ``openstack`` CLI in-process with
``--os-auth-type admin_token --os-token TOKEN --os-endpoint ENDPOINT``.

Loaded with ``-p tests.clients.osc_placement_shim``, this plugin registers
stand-ins for those two modules in ``sys.modules`` at configure time (before any
test module is collected), so upstream's test files run unchanged; importing it
elsewhere has no such effect.
``PlacementFixture`` here talks to the server named by ``$ALLOTMENT_OSC_ENDPOINT``
and, as upstream's fresh database per test does, empties it before each test.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from typing import Any

import fixtures
import pytest
import requests

ENDPOINT_VARIABLE = "ALLOTMENT_OSC_ENDPOINT"
TOKEN = "admin"
# The reset below needs parent_provider_uuid (1.14) and the startswith: trait filter (1.6).
RESET_MICROVERSION = "placement 1.39"


class _Placement:
    """Just enough HTTP to empty a placement server between tests."""

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update({"X-Auth-Token": token,
                                     "OpenStack-API-Version": RESET_MICROVERSION,
                                     "Accept": "application/json"})

    def get(self, path: str) -> Any:
        response = self.session.get(self.endpoint + path, timeout=30)
        response.raise_for_status()
        return response.json()

    def delete(self, path: str) -> None:
        response = self.session.delete(self.endpoint + path, timeout=30)
        if response.status_code not in (204, 404):
            raise RuntimeError(f"DELETE {path}: {response.status_code} {response.text}")

    def reset(self) -> None:
        """Delete every allocation, provider, custom resource class and custom trait."""
        providers = self.get("/resource_providers")["resource_providers"]
        consumers: set[str] = set()
        for provider in providers:
            allocations = self.get(f"/resource_providers/{provider['uuid']}/allocations")
            consumers.update(allocations["allocations"])
        for consumer in sorted(consumers):
            self.delete(f"/allocations/{consumer}")
        # Children before parents: a provider with children cannot be deleted.
        by_uuid = {provider["uuid"]: provider for provider in providers}

        def depth(provider: dict[str, Any]) -> int:
            count = 0
            while provider.get("parent_provider_uuid") in by_uuid:
                provider = by_uuid[provider["parent_provider_uuid"]]
                count += 1
            return count

        for provider in sorted(providers, key=depth, reverse=True):
            self.delete(f"/resource_providers/{provider['uuid']}")
        for resource_class in self.get("/resource_classes")["resource_classes"]:
            if resource_class["name"].startswith("CUSTOM_"):
                self.delete(f"/resource_classes/{resource_class['name']}")
        for trait in self.get("/traits?name=startswith:CUSTOM_")["traits"]:
            self.delete(f"/traits/{trait}")


class Logging(fixtures.Fixture):
    """Stands in for placement's ``capture.Logging``: capture logs, print none."""

    def _setUp(self) -> None:
        self.logger = self.useFixture(fixtures.FakeLogger(level=logging.INFO))


class PlacementFixture(fixtures.Fixture):
    """Stands in for placement's ``PlacementFixture``: a live server, emptied."""

    def __init__(self, token: str = TOKEN, **_ignored: Any) -> None:
        super().__init__()
        self.token = token
        self.endpoint = ""

    def _setUp(self) -> None:
        endpoint = os.environ.get(ENDPOINT_VARIABLE)
        if not endpoint:
            raise RuntimeError(f"${ENDPOINT_VARIABLE} must name the placement server to test")
        self.endpoint = endpoint
        _Placement(endpoint, self.token).reset()


def _install() -> None:
    names = ["placement", "placement.tests", "placement.tests.functional",
             "placement.tests.functional.fixtures"]
    parent: types.ModuleType | None = None
    for name in names:
        module = types.ModuleType(name)
        module.__path__ = []
        sys.modules[name] = module
        if parent is not None:
            setattr(parent, name.rpartition(".")[2], module)
        parent = module
    assert parent is not None
    for leaf, attributes in (("capture", {"Logging": Logging}),
                             ("placement", {"PlacementFixture": PlacementFixture})):
        module = types.ModuleType(f"{parent.__name__}.{leaf}")
        for key, value in attributes.items():
            setattr(module, key, value)
        sys.modules[module.__name__] = module
        setattr(parent, leaf, module)


def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is collected (and so before ``base.py`` is imported)."""
    _install()
