"""nova's own functional tests, run against allotment in-process.

The environment, built once under ``tests/clients/.cache/`` (gitignored) and
reused: nova's sdist unpacked (the tests and the files they read beside the
package: ``etc/nova/api-paste.ini``, ``doc/api_samples``), and a venv with
nova's wheel (its entry points), nova's test requirements and allotment's
runtime dependencies, pinned by ``tests/data/nova-constraints.txt``. allotment
itself is not installed there: the repository goes on the import path, so the
tests always run the working tree's code. Neither is upstream Placement: the
stand-ins in ``tests/clients/nova_shim/placement/`` are the only ``placement``.

The run: the tests are listed, dealt round-robin to a few ``python -m
subunit.run`` workers (nova's own runner, stestr, would import every
functional test module in each worker), and their subunit streams are read
back by ``nova_subunit.py`` in the nova venv.

SQLAlchemy's warnings: nova's WarningsFixture makes them errors when nova's
own modules raise them, and nova 34.0.0's queries do under SQLAlchemy 2.1
(``noload()`` is deprecated there), hence 2.0 in this venv. allotment raises
none (every warning recorded around each of its requests in the selection,
and around its migrations: none), so nothing had to be filtered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency there (nova 34.0.0 itself needs 3.11)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(__file__).resolve().parent / ".cache"
SHIM = Path(__file__).resolve().parent / "nova_shim"
SUBUNIT_READER = Path(__file__).resolve().parent / "nova_subunit.py"
NOVA_VERSION = "34.0.0"
CONSTRAINTS = ROOT / "tests" / "data" / "nova-constraints.txt"
UPPER_CONSTRAINTS = ROOT / "tests" / "data" / "upper-constraints.txt"
# In nova's test-requirements.txt but not needed to run the tests: linters, and
# coverage (its .pth would measure the workers whenever the parent pytest runs
# under coverage).
NOT_NEEDED = {"hacking", "bandit", "coverage"}
# As nova's tox.ini runs its functional tests (eventlet, greenlet leaks are failures).
TEST_ENVIRONMENT = {
    "OS_TEST_TIMEOUT": "160",
    "OS_STDOUT_CAPTURE": "1",
    "OS_STDERR_CAPTURE": "1",
    "NOVA_RAISE_ON_GREENLET_LEAK": "True",
    "OS_NOVA_DISABLE_EVENTLET_PATCHING": "False",
    "LC_ALL": "C.UTF-8",
}
INSTALL_TIMEOUT = 900
LIST_TIMEOUT = 300


def _say(message: str) -> None:
    print(f"[nova] {message}", file=sys.stderr, flush=True)


def allotment_requirements() -> list[str]:
    """allotment's runtime dependencies, as pyproject.toml declares them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def nova_test_requirements(source: Path) -> list[str]:
    """nova's test-requirements.txt, less the linters."""
    wanted = []
    for line in (source / "test-requirements.txt").read_text().splitlines():
        requirement = line.split("#", 1)[0].strip()
        if requirement and canonicalize_name(Requirement(requirement).name) not in NOT_NEEDED:
            wanted.append(requirement)
    return wanted


@dataclass(frozen=True)
class Environment:
    """nova's unpacked sdist and the venv that runs its tests."""

    root: Path

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def python(self) -> Path:
        return self.root / "venv" / "bin" / "python"

    @property
    def functional(self) -> Path:
        return self.source / "nova" / "tests" / "functional"


def environment_key(constraints: Path = CONSTRAINTS) -> str:
    """What the venv is made of: a change to any of it means a new venv."""
    parts = [NOVA_VERSION, f"{sys.version_info[0]}.{sys.version_info[1]}",
             constraints.read_text(), *allotment_requirements(), *sorted(NOT_NEEDED)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:12]


def _sdist(download: Path) -> Path:
    download.mkdir(parents=True, exist_ok=True)
    found = list(download.glob(f"nova-{NOVA_VERSION}.tar.gz"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", f"nova=={NOVA_VERSION}", "-d", str(download)],
                       check=True, timeout=300)
        found = list(download.glob(f"nova-{NOVA_VERSION}.tar.gz"))
    return found[0]


def _unpack(archive: Path, destination: Path) -> None:
    top = archive.name[:-len(".tar.gz")] + "/"
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            if member.name.startswith(top):
                member.name = member.name[len(top):]
                members.append(member)
        tar.extractall(destination, members=members, filter="data")


def _install(root: Path, source: Path, constraints: Path, pip_options: Sequence[str]) -> None:
    requirements = root / "requirements.txt"
    requirements.write_text("\n".join([f"nova=={NOVA_VERSION}", *nova_test_requirements(source),
                                       *allotment_requirements()]) + "\n")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    subprocess.run([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", "--only-binary", ":all:", *pip_options,
                    "-c", str(constraints), "-r", str(requirements)],
                   check=True, timeout=INSTALL_TIMEOUT)


def ensure_environment(cache: Path = CACHE, pip_options: Sequence[str] = ()) -> Environment:
    """The environment for this nova version and these pins, built if not there yet."""
    root = cache / f"nova-{NOVA_VERSION}-{environment_key()}"
    done = root / ".complete"
    if done.exists():
        return Environment(root)
    # Environments of other pins or versions are stale: one is kept at a time.
    for stale in cache.glob("nova-*-*"):
        if stale.is_dir() and stale != root:
            shutil.rmtree(stale, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    _say(f"building nova {NOVA_VERSION}'s test environment in {root}")
    environment = Environment(root)
    _unpack(_sdist(cache / "download" / "nova"), environment.source)
    _install(root, environment.source, CONSTRAINTS, pip_options)
    done.write_text(f"{time.monotonic() - started:.1f}\n")
    _say(f"built in {time.monotonic() - started:.0f} s")
    return environment


def build_seconds(environment: Environment) -> float:
    """How long the environment took to build (written into its marker)."""
    return float((environment.root / ".complete").read_text())


# --- running ------------------------------------------------------------------------


@dataclass
class Results:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    # nova's expectedFailure tests (known bugs, in nova's regression tests) that did fail.
    expected_failures: list[str] = field(default_factory=list)


@dataclass
class Run:
    results: Results
    listed: int
    elapsed: float
    workers: int
    log: str


def child_environment() -> dict[str, str]:
    """The parent's environment less OpenStack, pytest, coverage and venv variables."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("OS_", "PYTEST_", "COV_", "COVERAGE_", "PYTHON",
                                   "VIRTUAL_ENV"))}
    env.update(TEST_ENVIRONMENT)
    return env


def import_path(environment: Environment) -> str:
    """nova's sdist first (its tests, and its package: same code as the wheel), then our
    ``placement``, then the repository (allotment)."""
    return os.pathsep.join([str(environment.source), str(SHIM), str(ROOT)])


def placement_origin(environment: Environment) -> str:
    """Where ``import placement`` leads in the run's interpreter."""
    env = child_environment() | {"PYTHONPATH": import_path(environment)}
    probe = ("import importlib.metadata as m, placement\n"
             "try:\n    m.version('openstack-placement'); print('installed')\n"
             "except m.PackageNotFoundError:\n    print(placement.__file__)\n")
    return subprocess.run([str(environment.python), "-c", probe], env=env, check=True,
                          capture_output=True, text=True, timeout=120).stdout.strip()


def _targets(environment: Environment, names: Sequence[str] | None) -> list[str]:
    """subunit.run's arguments for ``names`` (modules, classes), or discovery of all."""
    if names is not None:
        return list(names)
    return ["discover", "-t", str(environment.source), str(environment.functional)]


def _read_streams(environment: Environment, streams: Sequence[Path]) -> dict[str, dict[str, str]]:
    reader = subprocess.run([str(environment.python), str(SUBUNIT_READER),
                             *[str(stream) for stream in streams]],
                            check=True, capture_output=True, text=True, timeout=300)
    tests: dict[str, dict[str, str]] = json.loads(reader.stdout)
    return tests


def list_tests(environment: Environment, names: Sequence[str] | None, workdir: Path) -> list[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    stream = workdir / "list.subunit"
    env = child_environment() | {"PYTHONPATH": import_path(environment)}
    targets = _targets(environment, names)
    arguments = [*targets, "--list"] if names is None else ["--list", *targets]
    errors = workdir / "list.err"
    with stream.open("wb") as out, errors.open("wb") as err:
        listing = subprocess.run([str(environment.python), "-m", "subunit.run", *arguments],
                                 env=env, cwd=workdir, stdout=out, stderr=err,
                                 timeout=LIST_TIMEOUT)
    listed = sorted(_read_streams(environment, [stream]))
    # A module that fails to import is listed as one test of unittest's.
    unloadable = [test for test in listed if test.startswith("unittest.")]
    if listing.returncode != 0 or unloadable:
        raise RuntimeError(f"listing nova's tests failed (exit {listing.returncode}; "
                           f"cannot load: {', '.join(unloadable) or '-'}):\n" + _tail(errors))
    return listed


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The worker and whatever it left running (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _tail(path: Path, size: int = 3000) -> str:
    return path.read_bytes()[-size:].decode(errors="replace") if path.exists() else ""


def run(environment: Environment, names: Sequence[str] | None, workdir: Path,
        workers: int, timeout: float) -> Run:
    """The tests of ``names`` (or every functional test), dealt to ``workers`` processes.

    A worker still running after ``timeout`` seconds is killed; its tests that never
    finished count as failed.
    """
    started = time.monotonic()
    tests = list_tests(environment, names, workdir)
    env = child_environment() | {"PYTHONPATH": import_path(environment)}
    targets = _targets(environment, names)
    processes: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    for index in range(min(workers, len(tests)) or 1):
        share = tests[index::workers]
        load_list = workdir / f"worker-{index}.list"
        load_list.write_text("\n".join(share) + "\n")
        stream, errors = workdir / f"worker-{index}.subunit", workdir / f"worker-{index}.err"
        arguments = ([*targets, "--load-list", str(load_list)] if names is None
                     else ["--load-list", str(load_list), *targets])
        with stream.open("wb") as out, errors.open("wb") as err:
            process = subprocess.Popen([str(environment.python), "-m", "subunit.run",
                                        *arguments], env=env, cwd=workdir, stdout=out,
                                       stderr=err, start_new_session=True)
        processes.append((process, stream, errors))
    deadline = started + timeout
    log = ""
    for process, _stream, errors in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log += f"worker {process.pid} still running after {timeout:.0f} s: killed\n"
        finally:
            _stop(process)
        log += _tail(errors)
    outcome = _read_streams(environment, [stream for _process, stream, _errors in processes])
    results = Results()
    for test in tests:
        result = outcome.get(test, {"status": "exists"})
        if result["status"] == "success":
            results.passed.append(test)
        elif result["status"] == "skip":
            results.skipped[test] = result.get("reason", "")
        elif result["status"] == "xfail":
            results.expected_failures.append(test)
        elif result["status"] in ("exists", "inprogress"):  # never began, or never ended
            results.failed[test] = "no result: its worker died or was killed"
        else:
            results.failed[test] = f"{result['status']}: {result.get('details', '')}"
    return Run(results, len(tests), time.monotonic() - started, workers, log)


# --- renewing the pins ----------------------------------------------------------------


def renew_constraints(workdir: Path) -> None:
    """Resolve the environment anew and freeze it into ``CONSTRAINTS``.

    The inputs: allotment's own pins (constraints.txt, what CI tests allotment
    with), but SQLAlchemy at OpenStack's upper-constraints pin (nova's gate runs
    2.0; under 2.1 nova's own queries warn and nova's tests make that an error).
    pip picks the newest of the rest that nova's requirements allow.
    """
    upper = {line.split("===")[0].lower(): line.split(";")[0].strip()
             for line in UPPER_CONSTRAINTS.read_text().splitlines() if "===" in line}
    pins = []
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name = line.split("==")[0].strip().lower()
        pins.append(upper[name].replace("===", "==") if name == "sqlalchemy" else line)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    inputs = workdir / "inputs.txt"
    inputs.write_text("\n".join(pins) + "\n")
    source = workdir / "source"
    _unpack(_sdist(CACHE / "download" / "nova"), source)
    _install(workdir, source, inputs, ())
    frozen = subprocess.run([str(workdir / "venv" / "bin" / "python"), "-m", "pip", "freeze",
                             "--disable-pip-version-check"], check=True, capture_output=True,
                            text=True).stdout
    header = (f"# nova {NOVA_VERSION}'s functional tests against allotment: the exact set\n"
              "# installed in their venv (tests/clients/nova_suite.py). Renew with\n"
              "# `.venv/bin/python -m tests.clients.nova_suite renew`: nova's requirements,\n"
              "# its test requirements and allotment's runtime dependencies resolved under\n"
              "# constraints.txt, SQLAlchemy at OpenStack's upper-constraints pin; frozen.\n")
    CONSTRAINTS.write_text(header + frozen)


if __name__ == "__main__":
    if sys.argv[1:] != ["renew"]:
        sys.exit(f"usage: {sys.executable} -m tests.clients.nova_suite renew")
    renew_constraints(CACHE / "renew")
    print(f"wrote {CONSTRAINTS}")
