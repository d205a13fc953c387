"""allotment behind a real Keystone 30.0.0, held to upstream 16.0.0's decisions.

Once per session: Keystone on loopback (``identity.py``: its own venv, SQLite,
fernet, bootstrap, gunicorn), the callers of ``matrix.CALLERS`` made through
its API, and ``allotment serve`` with ``[api] auth_strategy = keystone``, the
dashboard and metrics on, once per policy setting (default; legacy:
``enforce_new_defaults`` and ``enforce_scope`` off), on one seeded database.

- Upstream's routes: every caller x request gets the status upstream gave
  (``tests/data/keystone_decisions.json``, made by ``python -m
  tests.keystone.record``).
- allotment's own routes: refused (401/403) wherever upstream refused any of
  the requests that bound it (``matrix.ALLOTMENT_ROUTES``), and the refusal
  names no seeded provider or consumer.
- The ``openstack`` CLI with a password login prints what it printed against
  upstream.

The in-process tests with a fake Keystone (``tests/test_auth_keystone.py``)
stay for speed; this group is selected with ``-m keystone``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.keystone import cloud, matrix
from tests.keystone.identity import KEYSTONE_VERSION, Keystone
from tests.keystone.record import COMMAND, DATA
from tests.support.needs import require

pytestmark = pytest.mark.keystone

RECORDED: dict[str, Any] = json.loads(DATA.read_text())
ROWS = [(policy, caller) for policy in matrix.POLICIES for caller in matrix.CALLERS]
ALLOTMENT_CONF = "[allotment]\ndashboard = True\nmetrics = True\n"


@pytest.fixture(scope="session")
def keystone_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cloud.Cloud]:
    """Keystone, started once, and the callers made in it. One that cannot be started
    (its venv's install, its start, its API) skips here and fails under CI=true."""
    keystone = Keystone(tmp_path_factory.mktemp("real-keystone"))
    try:
        keystone.start()
        made = cloud.make_cloud(keystone)
    except Exception as exc:
        keystone.stop()
        require(str(exc), f"cannot run Keystone {KEYSTONE_VERSION}")
    try:
        yield made
    finally:
        keystone.stop()


@pytest.fixture(scope="session")
def allotment_urls(keystone_cloud: cloud.Cloud, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[dict[str, str]]:
    """policy -> URL of an allotment serve on one database seeded as upstream was."""
    workdir = tmp_path_factory.mktemp("allotment-behind-keystone")
    with cloud.placements("allotment", workdir, keystone_cloud.keystone,
                          ALLOTMENT_CONF) as urls:
        cloud.seed(urls["default"], keystone_cloud)
        yield urls


def _answers(urls: dict[str, str], made: cloud.Cloud, policy: str, caller: str,
             calls: list[matrix.Call]) -> dict[str, cloud.Answer]:
    headers = made.callers[caller]
    return {call.key: cloud.send(urls[policy], call, made, headers) for call in calls}


@pytest.mark.parametrize(("policy", "caller"), ROWS, ids=[f"{p}-{c}" for p, c in ROWS])
def test_upstream_routes_decided_as_upstream(allotment_urls: dict[str, str],
                                             keystone_cloud: cloud.Cloud,
                                             policy: str, caller: str) -> None:
    expected = RECORDED["decisions"][policy].get(caller)
    assert expected is not None, f"no recorded decisions for {caller}: run {COMMAND}"
    unrecorded = [call.key for call in matrix.UPSTREAM_CALLS if call.key not in expected]
    assert not unrecorded, f"no recorded decision for {unrecorded}: run {COMMAND}"
    answers = _answers(allotment_urls, keystone_cloud, policy, caller, matrix.UPSTREAM_CALLS)
    differ = {key: f"upstream {expected[key]}, allotment {answer.status}"
              for key, answer in answers.items() if answer.status != expected[key]}
    assert not differ, json.dumps(differ, indent=1)


@pytest.mark.parametrize(("policy", "caller"), ROWS, ids=[f"{p}-{c}" for p, c in ROWS])
def test_own_routes_no_wider_than_upstream(allotment_urls: dict[str, str],
                                           keystone_cloud: cloud.Cloud,
                                           policy: str, caller: str) -> None:
    upstream = RECORDED["decisions"][policy].get(caller)
    assert upstream is not None, f"no recorded decisions for {caller}: run {COMMAND}"
    calls = [matrix.allotment_call(key) for key in matrix.ALLOTMENT_ROUTES]
    answers = _answers(allotment_urls, keystone_cloud, policy, caller, calls)
    leaks = {}
    for key, bound in matrix.ALLOTMENT_ROUTES.items():
        refused_by = [b for b in bound if upstream[b] in matrix.REFUSED]
        if not refused_by:
            continue
        answer = answers[key]
        # /metrics may also be absent from the API's listener (a listener of its own).
        allowed = matrix.REFUSED + ((404,) if key == "GET /metrics" else ())
        named = [s for s in matrix.SECRETS if s.encode() in answer.body]
        parts = matrix.FILTERED.get(key)
        if parts is not None and answer.status == 200:
            # Filtered, not refused: only the refused parts must be absent.
            named += [b for b in refused_by
                      if keystone_cloud.fill(parts[b]).encode() in answer.body]
            allowed = (*allowed, 200)
        if answer.status not in allowed or named:
            names = f", names {', '.join(named)}" if named else ""
            refusals = ", ".join(f"{b} ({upstream[b]})" for b in refused_by)
            leaks[key] = f"allotment {answer.status}{names}; upstream refused {refusals}"
    assert not leaks, json.dumps(leaks, indent=1)


@pytest.mark.parametrize(("user", "command"), matrix.CLI_COMMANDS,
                         ids=[cloud.cli_key(u, c) for u, c in matrix.CLI_COMMANDS])
def test_openstack_cli_prints_what_upstream_printed(allotment_urls: dict[str, str],
                                                    keystone_cloud: cloud.Cloud,
                                                    user: str, command: list[str]) -> None:
    keystone_cloud.point_placement_at(allotment_urls["default"])
    expected = RECORDED["cli"].get(cloud.cli_key(user, command))
    assert expected is not None, f"no recorded output: run {COMMAND}"
    assert cloud.run_cli(keystone_cloud, user, command) == expected


def test_the_data_file_says_what_it_was_recorded_with() -> None:
    assert RECORDED["command"] == COMMAND
    assert RECORDED["recorded_with"]["openstack-placement"] == "16.0.0"
    assert RECORDED["recorded_with"]["keystone"] == "30.0.0"
    assert set(RECORDED["decisions"]) == set(matrix.POLICIES)
