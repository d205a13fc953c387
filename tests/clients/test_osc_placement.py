"""osc-placement's own functional tests against a live ``allotment serve``.

The tests are upstream's, unchanged: ``osc_placement/tests/functional`` of the
installed osc-placement (its wheel ships ``osc_placement/tests``), or, where the
installed copy lacks them or ``ALLOTMENT_OSC_PLACEMENT_TESTS=sdist`` asks for it,
of the same version's sdist from PyPI (``pip download``), unpacked once under
``tests/clients/.cache/`` (gitignored). They run the ``openstack`` CLI in-process
with ``--os-auth-type admin_token --os-token admin --os-endpoint URL``, in a child
``python -m pytest`` (the CLI changes logging and patches osc_lib as it goes).

What is ours: ``tests/clients/osc_placement_shim.py``, the stand-ins for the two
upstream placement test fixtures that ``base.py`` imports (the server's endpoint
and token, a server emptied before each test as upstream's fresh database is;
see there).

Run alone: ``ALLOTMENT_TEST_DATABASES=sqlite .venv/bin/pytest -m clients
tests/clients/test_osc_placement.py``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.clients import live, upstream_suite
from tests.clients.osc_placement_shim import ENDPOINT_VARIABLE

pytestmark = pytest.mark.clients

SUITE = upstream_suite.Suite(
    distribution="osc-placement", package="osc_placement",
    subdir=Path("osc_placement", "tests", "functional"), marker="base.py",
    source_variable="ALLOTMENT_OSC_PLACEMENT_TESTS", shim="tests.clients.osc_placement_shim")
# osc-placement 4.9.1 runs 160 functional tests; far fewer means something went missing.
MIN_TESTS = 150


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[live.LiveServer]:
    process = live.start(tmp_path_factory.mktemp("osc-placement-server"))
    try:
        yield process
    finally:
        process.stop()


def test_osc_placement_functional(server: live.LiveServer, tmp_path: Path) -> None:
    outcome = upstream_suite.run(SUITE, tmp_path, {
        ENDPOINT_VARIABLE: server.url,
        # No clouds.yaml of the user's merged into the CLI's options.
        "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml"),
        # test_plugin runs ``openstack --help`` from $PATH: this venv's.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    })
    upstream_suite.check(SUITE, outcome, server, MIN_TESTS)
