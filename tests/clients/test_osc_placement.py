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

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.clients import live
from tests.clients.osc_placement_shim import ENDPOINT_VARIABLE

pytestmark = pytest.mark.clients

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(__file__).resolve().parent / ".cache"
SOURCE_VARIABLE = "ALLOTMENT_OSC_PLACEMENT_TESTS"
DISTRIBUTION = "osc-placement"
SUBDIR = Path("osc_placement", "tests", "functional")
# osc-placement 4.9.1 runs 160 functional tests; far fewer means something went missing.
MIN_TESTS = 150
# The whole child run; it takes about two minutes on 2 cores. Each test also has
# oslotest's timeout.
RUN_TIMEOUT = 300
TEST_TIMEOUT = 60


@dataclass
class Results:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def osc_placement_version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("osc-placement is not installed: install the test extras "
                    "(pip install -e '.[test]')")


def installed_tests() -> Path | None:
    """The functional tests of the installed osc-placement, if its wheel ships them."""
    spec = importlib.util.find_spec("osc_placement")
    if spec is None or spec.origin is None:
        return None
    tests = Path(spec.origin).parent.parent / SUBDIR
    return tests if (tests / "base.py").is_file() else None


def sdist_package(version: str, cache: Path = CACHE) -> Path:
    """A directory holding the ``osc_placement`` package of osc-placement ``version``'s sdist.

    The whole package, not only its tests: the directory goes first on the import
    path, so the CLI plugin is imported from it too (the same version as installed).
    """
    root = cache / f"{DISTRIBUTION}-{version}"
    done = root / ".complete"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    download = cache / "download"
    download.mkdir(parents=True, exist_ok=True)
    archive = download / f"osc_placement-{version}.tar.gz"
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"{DISTRIBUTION}=={version}", "-d",
                        str(download)], check=True, timeout=300)
    top = f"osc_placement-{version}/"
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            if member.name.startswith(top + "osc_placement/"):
                member.name = member.name[len(top):]
                members.append(member)
        tar.extractall(root, members=members, filter="data")
    done.touch()
    return root


def functional_tests() -> tuple[Path, list[str]]:
    """The tests directory and the import path it needs in front."""
    version = osc_placement_version()
    tests = None if os.environ.get(SOURCE_VARIABLE) == "sdist" else installed_tests()
    if tests is not None:
        return tests, []
    package = sdist_package(version)
    return package / SUBDIR, [str(package)]


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
    process = live.start(tmp_path_factory.mktemp("osc-placement-server"))
    try:
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
    """Upstream's functional tests in a child pytest against the server at ``url``."""
    tests, pythonpath = functional_tests()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    junit = workdir / "junit.xml"
    junit.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OS_", "OPENSTACKSDK_", "PYTEST_", "COV_"))}
    env.update({
        ENDPOINT_VARIABLE: url,
        # No clouds.yaml or secure.yaml of the user's merged into the CLI's options.
        "OS_CLIENT_CONFIG_FILE": str(workdir / "clouds.yaml"),
        "OS_CLIENT_SECURE_FILE": str(workdir / "secure.yaml"),
        "OS_TEST_TIMEOUT": str(TEST_TIMEOUT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([*pythonpath, str(ROOT)]),
        # test_plugin runs ``openstack --help`` from $PATH: this venv's.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    })
    command = [sys.executable, "-m", "pytest", "-c", str(workdir / "pytest.ini"),
               "--rootdir", str(workdir), "-p", "no:cacheprovider",
               "-p", "tests.clients.osc_placement_shim", "-q", "-rfEs",
               f"--junitxml={junit}", str(tests)]
    started = time.monotonic()
    child = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    output = child.stdout + child.stderr
    assert junit.exists(), f"no results from the child pytest (exit {child.returncode}):\n{output}"
    return Run(read_junit(junit), output, child.returncode, elapsed, tests)


def test_osc_placement_functional(server: live.LiveServer, tmp_path: Path) -> None:
    run = run_functional_tests(server.url, tmp_path)
    results = run.results
    report = (f"osc-placement {osc_placement_version()} from {run.source}: "
              f"{len(results.passed)} passed, {len(results.failed)} failed, "
              f"{len(results.skipped)} skipped in {run.elapsed:.1f} s\n")
    report += "".join(f"  {name}: {why}\n" for name, why in
                      {**results.failed, **results.skipped}.items())
    detail = (f"{report}\n{run.output[-20000:]}\n--- server log ---\n"
              + server.log_path.read_text(errors="replace")[-5000:])
    assert not results.failed and not results.skipped, detail
    assert len(results.passed) >= MIN_TESTS, detail
    assert run.returncode == 0, detail
