"""Running a client project's own functional tests against a live allotment.

Both client suites (osc-placement's, openstacksdk's) are found the same way
(the installed wheel's copy, or the same version's sdist from PyPI, unpacked
once under ``tests/clients/.cache/``), run the same way (a child
``python -m pytest`` with a shim plugin of ours and JUnit XML out) and judged
the same way (nothing failed, errored or skipped, enough tests ran).
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.clients import live

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(__file__).resolve().parent / ".cache"
# The whole child run, and oslotest's timeout for each test in it.
RUN_TIMEOUT = 300
TEST_TIMEOUT = 60


@dataclass(frozen=True)
class Suite:
    """Where one project's functional tests live."""

    distribution: str    # on PyPI, e.g. "osc-placement"
    package: str         # the import package, e.g. "osc_placement"
    subdir: Path         # the tests, relative to the package's parent
    marker: str          # a file or directory that shows the tests are there
    source_variable: str  # "<VARIABLE>=sdist" forces the sdist
    shim: str            # our pytest plugin for the child run

    def version(self) -> str:
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{self.distribution} is not installed: install the test extras "
                        "(pip install -e '.[test]')")

    def installed_tests(self) -> Path | None:
        """The tests of the installed package, if its wheel ships them."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            return None
        tests = Path(spec.origin).parent.parent / self.subdir
        return tests if (tests / self.marker).exists() else None

    def sdist_package(self, version: str, cache: Path = CACHE) -> Path:
        """A directory holding the package of the ``version`` sdist.

        The whole package, not only its tests: the directory goes first on the
        import path, so the package itself is imported from it too.
        """
        root = cache / f"{self.distribution}-{version}"
        done = root / ".complete"
        if done.exists():
            return root
        shutil.rmtree(root, ignore_errors=True)
        download = cache / "download" / self.distribution
        download.mkdir(parents=True, exist_ok=True)
        if not list(download.glob(f"*-{version}.tar.gz")):
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                            "--no-binary", ":all:", f"{self.distribution}=={version}", "-d",
                            str(download)], check=True, timeout=300)
        archive = next(download.glob(f"*-{version}.tar.gz"))
        top = archive.name[:-len(".tar.gz")] + "/"
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                if member.name.startswith(top + self.package + "/"):
                    member.name = member.name[len(top):]
                    members.append(member)
            tar.extractall(root, members=members, filter="data")
        done.touch()
        return root

    def tests(self) -> tuple[Path, list[str]]:
        """The tests directory and the import path it needs in front."""
        version = self.version()
        tests = None if os.environ.get(self.source_variable) == "sdist" else (
            self.installed_tests())
        if tests is not None:
            return tests, []
        package = self.sdist_package(version)
        return package / self.subdir, [str(package)]


@dataclass
class Results:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


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


@dataclass
class Run:
    results: Results
    output: str
    returncode: int
    elapsed: float
    source: Path


def run(suite: Suite, workdir: Path, env_extra: dict[str, str]) -> Run:
    """The suite's tests in a child pytest; ``env_extra`` points them at the server."""
    tests, pythonpath = suite.tests()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "pytest.ini").write_text("[pytest]\n")
    junit = workdir / "junit.xml"
    junit.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OS_", "OPENSTACKSDK_", "PYTEST_", "COV_"))}
    env.update({
        # No secure.yaml of the user's merged into the clients' options.
        "OS_CLIENT_SECURE_FILE": str(workdir / "secure.yaml"),
        "OS_TEST_TIMEOUT": str(TEST_TIMEOUT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "PYTHONPATH": os.pathsep.join([*pythonpath, str(ROOT)]),
    })
    env.update(env_extra)
    command = [sys.executable, "-m", "pytest", "-c", str(workdir / "pytest.ini"),
               "--rootdir", str(workdir), "-p", "no:cacheprovider", "-p", suite.shim,
               "-q", "-rfEs", f"--junitxml={junit}", str(tests)]
    started = time.monotonic()
    child = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True,
                           timeout=RUN_TIMEOUT)
    elapsed = time.monotonic() - started
    output = child.stdout + child.stderr
    assert junit.exists(), f"no results from the child pytest (exit {child.returncode}):\n{output}"
    return Run(read_junit(junit), output, child.returncode, elapsed, tests)


def check(suite: Suite, outcome: Run, server: live.LiveServer, min_tests: int) -> None:
    """Everything passed (nothing failed or was skipped), and enough tests ran."""
    results = outcome.results
    report = (f"{suite.distribution} {suite.version()} from {outcome.source}: "
              f"{len(results.passed)} passed, {len(results.failed)} failed, "
              f"{len(results.skipped)} skipped in {outcome.elapsed:.1f} s\n")
    report += "".join(f"  {name}: {why}\n" for name, why in
                      {**results.failed, **results.skipped}.items())
    detail = (f"{report}\n{outcome.output[-20000:]}\n--- server log ---\n"
              + server.log_path.read_text(errors="replace")[-5000:])
    assert not results.failed and not results.skipped, detail
    assert len(results.passed) >= min_tests, detail
    assert outcome.returncode == 0, detail
