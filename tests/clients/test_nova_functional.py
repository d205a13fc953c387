"""nova 34.0.0's own functional tests that exercise Placement, against allotment.

nova's functional tests start nova's services in-process and give them a
placement through ``nova.tests.functional.fixtures.PlacementFixture``, a
subclass of upstream Placement's test fixture. Here that base class is ours
(``tests/clients/nova_shim/placement/``): allotment's WSGI application behind
the same wsgi-intercept, noauth2, on a fresh SQLite database per test, so the
requests nova's report client, resource tracker, scheduler and nova-manage make
are answered by allotment. The tests are nova's, unchanged, from its sdist;
upstream Placement is not installed in their venv (checked). How the venv is
built and the tests are run: ``tests/clients/nova_suite.py``.

The selection (``SELECTION``, 89 tests, a few minutes on 2 cores): the
report client's calls one by one, reshapes (vGPU, SEV, VCPU to PCPU), the
resource tracker's provider config and inventory, PCI devices in Placement,
provider trees and traits, server moves with nested bandwidth providers (one
request group per port), and ``nova-manage placement audit`` and
``sync_aggregates``. Every test must pass; none is skipped, as none is against
upstream Placement 16.0.0.

``ALLOTMENT_NOVA_TESTS=all`` runs every nova functional test instead (2,811;
most of them start the PlacementFixture; hours on 2 cores): nothing may fail,
skips and nova's expected failures (its known bugs) are reported.
``ALLOTMENT_NOVA_TESTS=<name>,<name>`` runs those modules or classes
(``nova.tests.functional.test_servers``, ...).

Run alone: ``.venv/bin/pytest -m clients tests/clients/test_nova_functional.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.clients import nova_suite

pytestmark = pytest.mark.clients

VARIABLE = "ALLOTMENT_NOVA_TESTS"
_F = "nova.tests.functional."
# Server moves with a port's bandwidth on nested providers, one request group per port.
_MOVES = _F + ("test_servers_resource_request."
               "ServerMoveWithMultiGroupResourceRequestBasedSchedulingTest")
SELECTION = [_F + name for name in [
    "test_report_client",
    "libvirt.test_reshape",
    "libvirt.test_numa_servers.ReshapeForPCPUsTest",
    "compute.test_resource_tracker",
    "libvirt.test_pci_in_placement",
    "test_servers_provider_tree",
    "test_nova_manage.TestNovaManagePlacementAudit",
    "test_nova_manage.TestNovaManagePlacementSyncAggregates",
]] + [_MOVES + "." + name for name in [
    # One of each move, and reschedules to an alternate host (the allocations
    # moved between candidates); the class's other tests make a move fail inside
    # nova (a PCI claim, neutron, no alternate left).
    "test_migrate_server_with_qos_ports",
    "test_migrate_revert_with_qos_ports",
    "test_migrate_server_with_qos_port_reschedule_success",
    "test_resize_server_with_qos_ports",
    "test_resize_revert_with_qos_ports",
    "test_live_migrate_with_qos_port",
    "test_live_migrate_with_qos_port_reschedule_success",
    "test_evacuate_with_qos_port",
    "test_unshelve_offloaded_server_with_qos_port",
]]
# nova 34.0.0 has 89 tests there; fewer means some went missing.
MIN_TESTS = 89
# None of the selection skips, against allotment or upstream Placement 16.0.0.
EXPECTED_SKIPS: dict[str, str] = {}
# The tests spend much of their time waiting (polling for a server's state), so
# four workers keep two cores busy.
WORKERS = 4
# Seconds for the whole run (a hang fails the test); nova's own per-test timeout
# (OS_TEST_TIMEOUT) is 160.
SELECTION_TIMEOUT = 900
WHOLE_TIMEOUT = 8 * 3600


def _chosen() -> list[str] | None:
    """The names to run; None for every functional test."""
    value = os.environ.get(VARIABLE, "").strip()
    if not value:
        return SELECTION
    if value == "all":
        return None
    return [name.strip() for name in value.split(",") if name.strip()]


def test_nova_functional(tmp_path: Path) -> None:
    environment = nova_suite.ensure_environment()
    # Our stand-in answers `import placement`, and no upstream Placement is installed.
    origin = nova_suite.placement_origin(environment)
    assert origin == str(nova_suite.SHIM / "placement" / "__init__.py"), origin
    names = _chosen()
    outcome = nova_suite.run(environment, names, tmp_path, WORKERS,
                             SELECTION_TIMEOUT if names is not None else WHOLE_TIMEOUT)
    results = outcome.results
    report = (f"nova {nova_suite.NOVA_VERSION} functional tests against allotment "
              f"({'all' if names is None else len(names)} names, {outcome.workers} workers): "
              f"{outcome.listed} listed, {len(results.passed)} passed, "
              f"{len(results.failed)} failed, {len(results.skipped)} skipped, "
              f"{len(results.expected_failures)} failed as nova expects in "
              f"{outcome.elapsed:.0f} s (environment built in "
              f"{nova_suite.build_seconds(environment):.0f} s)\n")
    report += "".join(f"  skipped {name}: {why}\n" for name, why in results.skipped.items())
    failures = "".join(f"\n=== {name}\n{why[-8000:]}\n" for name, why in results.failed.items())
    print(report)
    assert not results.failed, report + failures + "\n--- workers' stderr ---\n" + outcome.log
    if names == SELECTION:
        assert results.skipped == EXPECTED_SKIPS, report
        assert not results.expected_failures, report
        assert len(results.passed) >= MIN_TESTS, report
    assert outcome.listed > 0 and len(results.passed) > 0, report
