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

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import requests

from tests.clients import live

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(__file__).resolve().parent / ".cache"
SOURCE_VARIABLE = "ALLOTMENT_OPENSTACKSDK_TESTS"
SUBDIR = Path("openstack", "tests", "functional", "placement")
CLOUD = "allotment"
TOKEN = "admin"
# noauth2 takes the caller from the token, "user[:project]"; so does openstacksdk_shim.
USER_ID = PROJECT_ID = TOKEN
# openstacksdk 4.22.0 has 8 placement functional tests; fewer means something went missing.
MIN_TESTS = 8
# The whole child run; it takes a few seconds. Each test also has oslotest's timeout.
RUN_TIMEOUT = 300
TEST_TIMEOUT = 60
# The clouds base.py opens; all are the one admin cloud here.
CLOUD_VARIABLES = ("OS_CLOUD", "OPENSTACKSDK_DEMO_CLOUD", "OPENSTACKSDK_DEMO_CLOUD_ALT",
                   "OPENSTACKSDK_OPERATOR_CLOUD", "OPENSTACKSDK_SYSTEM_ADMIN_CLOUD")


@dataclass
class Results:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def sdk_version() -> str:
    try:
        return importlib.metadata.version("openstacksdk")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("openstacksdk is not installed: install the test extras "
                    "(pip install -e '.[test]')")


def installed_tests() -> Path | None:
    """The placement functional tests of the installed openstacksdk, if it ships them."""
    spec = importlib.util.find_spec("openstack")
    if spec is None or spec.origin is None:
        return None
    tests = Path(spec.origin).parent.parent / SUBDIR
    return tests if (tests / "v1").is_dir() else None


def sdist_package(version: str, cache: Path = CACHE) -> Path:
    """A directory holding the ``openstack`` package of openstacksdk ``version``'s sdist."""
    root = cache / f"openstacksdk-{version}"
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    archive = download / f"openstacksdk-{version}.tar.gz"
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"openstacksdk=={version}", "-d",
                        str(download)], check=True, timeout=300)
    prefix = f"openstacksdk-{version}/openstack/"
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            if member.name.startswith(prefix):
                member.name = member.name[len(f"openstacksdk-{version}/"):]
                members.append(member)
        tar.extractall(root, members=members, filter="data")
    done.touch()
    return root


def functional_tests() -> tuple[Path, list[str]]:
    """The tests directory and the import path it needs in front."""
    version = sdk_version()
    tests = None if os.environ.get(SOURCE_VARIABLE) == "sdist" else installed_tests()
    if tests is not None:
        return tests, []
    package = sdist_package(version)
    return package / SUBDIR, [str(package)]


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


def read_junit(path: Path) -> Results:
    results = Results()
    for case in ET.parse(path).iter("testcase"):
        name = f"{case.get('classname')}.{case.get('name')}"
        problem = next((child for child in case
                        if child.tag in ("failure", "error", "skipped")), None)
        if problem is None:
            results.passed.append(name)
        elif problem.tag == "skipped":
            results.skipped[name] = problem.get("message") or ""
        else:
            text = (problem.text or problem.get("message") or "").strip().splitlines()
            results.failed[name] = f"{problem.tag}: {text[-1] if text else ''}"
    return results


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[live.LiveServer]:
    process = live.start(tmp_path_factory.mktemp("openstacksdk-server"))
    try:
        seed_cloud(process.url)
        yield process
    finally:
        process.stop()


@dataclass
class Run:
    results: Results
    output: str
    returncode: int
    elapsed: float
    source: Path


def run_functional_tests(url: str, workdir: Path) -> Run:
    """Upstream's placement functional tests in a child pytest against the server at ``url``."""
    tests, pythonpath = functional_tests()
    workdir.mkdir(parents=True, exist_ok=True)
    clouds = workdir / "clouds.yaml"
    write_clouds_yaml(clouds, url)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    junit = workdir / "junit.xml"
    junit.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OS_", "OPENSTACKSDK_", "PYTEST_", "COV_"))}
    env.update({name: CLOUD for name in CLOUD_VARIABLES})
    env.update({
        "OS_CLIENT_CONFIG_FILE": str(clouds),
        # No secure.yaml of the user's merged into our cloud.
        "OS_CLIENT_SECURE_FILE": str(workdir / "secure.yaml"),
        "OS_TEST_TIMEOUT": str(TEST_TIMEOUT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([*pythonpath, str(ROOT)]),
    })
    command = [sys.executable, "-m", "pytest", "-c", str(workdir / "pytest.ini"),
               "--rootdir", str(workdir), "-p", "no:cacheprovider",
               "-p", "tests.clients.openstacksdk_shim", "-q", "-rfEs",
               f"--junitxml={junit}", str(tests)]
    started = time.monotonic()
    child = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    output = child.stdout + child.stderr
    assert junit.exists(), f"no results from the child pytest (exit {child.returncode}):\n{output}"
    return Run(read_junit(junit), output, child.returncode, elapsed, tests)


def test_openstacksdk_placement_functional(server: live.LiveServer, tmp_path: Path) -> None:
    run = run_functional_tests(server.url, tmp_path)
    results = run.results
    report = (f"openstacksdk {sdk_version()} from {run.source}: {len(results.passed)} passed, "
              f"{len(results.failed)} failed, {len(results.skipped)} skipped "
              f"in {run.elapsed:.1f} s\n")
    report += "".join(f"  {name}: {why}\n" for name, why in
                      {**results.failed, **results.skipped}.items())
    detail = (f"{report}\n{run.output[-20000:]}\n--- server log ---\n"
              + server.log_path.read_text(errors="replace")[-5000:])
    assert not results.failed and not results.skipped, detail
    assert len(results.passed) >= MIN_TESTS, detail
    assert run.returncode == 0, detail
