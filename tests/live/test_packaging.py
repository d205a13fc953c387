"""The package as a user gets it: built in isolation, installed from the wheel.

``python -m build`` makes the sdist from a copy of the checkout (its files that
git tracks or would track, as a fresh clone has them), then the wheel from that
sdist, each in an isolated environment with the newest setuptools that
``[build-system]`` allows: what pip does for ``pip install allotment`` from an
sdist (kolla's and openstack-helm's image builds). Any warning the build prints
fails the test, so a setuptools deprecation shows here long before a later
release turns it into an error. The wheel then goes into a fresh venv (its
dependencies from constraints.txt), and what an operator relies on is used
there, outside the checkout: the four console scripts, the
``placement.wsgi.api:application`` shim, the dashboard's files, the migrations
and the entry points oslo's tools look up.

It asks the package index (setuptools for the build, the dependencies for the
venv): marked ``network``. About a minute with pip's cache warm.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from allotment.db import migrate

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "allotment" / "dashboard"
VERSIONS = ROOT / "allotment" / "db" / "migrations" / "versions"
SCRIPTS = ("allotment", "placement-manage", "placement-status", "placement-api")

# A line of the build's output that warns: Python's warnings (setuptools'
# BuildBackendWarning, SetuptoolsDeprecationWarning, as build shows them:
# "WARNING ..."), distutils' "warning: ...", "DEPRECATED".
WARNING = re.compile(r"warn|deprecat", re.IGNORECASE)
# setuptools echoes each file it copies or adds; a file's name is not a warning.
FILE_ECHO = re.compile(r"^(copying|adding|creating|removing|byte-compiling) ")

def warnings_in(output: str) -> list[str]:
    """The lines of a build's output that warn."""
    return [line for line in output.splitlines()
            if WARNING.search(line) and not FILE_ECHO.match(line)]


def test_warnings_in_finds_the_backends_warnings() -> None:
    output = "\n".join([
        "running egg_info",
        "copying allotment/warnings.py -> build/lib/allotment",
        "WARNING `project.license` as a TOML table is deprecated",
        "warning: no files found matching 'NOTES'",
        "x.py:82: SetuptoolsDeprecationWarning: Invalid dash-separated options",
    ])
    assert warnings_in(output) == output.splitlines()[2:]


def _source_copy(target: Path) -> Path:
    """The checkout's files as a fresh clone has them (plus files not yet added),
    so that nothing a previous build left in the checkout (an egg-info's
    SOURCES.txt, which setuptools reads back) reaches the sdist."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            (target / name).write_bytes(source.read_bytes())
    return target


def _build(source: Path, outdir: Path) -> tuple[Path, Path]:
    # PYTHONDONTWRITEBYTECODE makes distutils' build_py warn that it skips
    # byte-compiling: the caller's environment, not the project, so it is left out.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONDONTWRITEBYTECODE", "PYTHONWARNINGS", "PYTHONPATH")}
    done = subprocess.run([sys.executable, "-m", "build", "--outdir", str(outdir), str(source)],
                          cwd=source, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert warnings_in(output) == [], output[-6000:]
    sdists, wheels = list(outdir.glob("*.tar.gz")), list(outdir.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(outdir.iterdir())
    return sdists[0], wheels[0]


def _fresh_venv(path: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    python = path / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "-c", str(ROOT / "constraints.txt"), str(wheel)],
        capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-6000:]
    return python


# Run by the venv's python, outside the checkout: the WSGI applications an operator
# points a server at, each asked for the pages that need the package's data files,
# and the entry points loaded as oslo's tools load them (stevedore).
_INSTALLED_SCRIPT = r"""
import hashlib, io, json, runpy, sys
from importlib import metadata
import allotment, placement
from oslo_middleware.healthcheck.pluginbase import HealthcheckBaseExtension
from oslo_policy import policy
from stevedore import driver

def get(app, path):
    status = []
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
               "SERVER_NAME": "localhost", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_X_AUTH_TOKEN": "admin",
               "wsgi.url_scheme": "http", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
               "wsgi.version": (1, 0), "wsgi.multithread": False,
               "wsgi.multiprocess": False, "wsgi.run_once": False}
    body = b"".join(app(environ, lambda s, h, e=None: status.append(s)))
    return [status[0], hashlib.sha256(body).hexdigest()]

paths = ["/", "/healthcheck", "/resource_providers", "/dashboard"] + [
    "/dashboard/static/" + name for name in sys.argv[2:]]
from placement.wsgi.api import application as shim
script = runpy.run_path(sys.argv[1], run_name="placement_api")["application"]
points = {group: {ep.name: ep.value for ep in metadata.entry_points(group=group)}
          for group in ("oslo.policy.policies", "oslo.policy.enforcer",
                        "oslo.middleware.healthcheck")}
check = driver.DriverManager("oslo.middleware.healthcheck", "database").driver
print(json.dumps({
    "files": [allotment.__file__, placement.__file__],
    "shim": {path: get(shim, path) for path in paths},
    "script": {path: get(script, path) for path in paths},
    "entry_points": points,
    "rules": len(driver.DriverManager("oslo.policy.policies", "placement",
                                      invoke_on_load=True).driver),
    "enforcer": isinstance(driver.DriverManager("oslo.policy.enforcer", "placement",
                                                invoke_on_load=True).driver, policy.Enforcer),
    "healthcheck": issubclass(check, HealthcheckBaseExtension),
}))
"""


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.network
def test_the_built_wheel_installs_and_serves(tmp_path: Path) -> None:
    sdist, wheel = _build(_source_copy(tmp_path / "source"), tmp_path / "dist")

    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read("allotment-0.1.0.dist-info/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
    assert "allotment-0.1.0.dist-info/licenses/LICENSE" in names
    with tarfile.open(sdist) as archive:
        assert "allotment-0.1.0/LICENSE" in archive.getnames()
    migrations = sorted(path.name for path in VERSIONS.glob("*.py"))
    assert sorted(name.rsplit("/", 1)[1] for name in names
                  if name.startswith("allotment/db/migrations/versions/")) == migrations

    python = _fresh_venv(tmp_path / "venv", wheel)
    bin_dir = python.parent
    work = tmp_path / "work"  # outside the checkout, so only the installed package imports
    work.mkdir()
    conf_dir = tmp_path / "etc"
    conf_dir.mkdir()
    database = tmp_path / "placement.sqlite"
    conf = conf_dir / "placement.conf"
    conf.write_text(
        f"[placement_database]\nconnection = sqlite:///{database}\n"
        "[api]\nauth_strategy = noauth2\n[allotment]\ndashboard = True\n")
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["OS_PLACEMENT_CONFIG_DIR"] = str(conf_dir)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(list(argv), cwd=work, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, (argv, done.stdout[-3000:], done.stderr[-3000:])
        return done

    for name in SCRIPTS:
        assert (bin_dir / name).is_file(), name
    run(str(bin_dir / "allotment"), "--help")
    run(str(bin_dir / "placement-api"), "--help")
    # The migrations, from the wheel, through upstream's command.
    run(str(bin_dir / "placement-manage"), "--config-file", str(conf), "db", "sync")
    version = run(str(bin_dir / "allotment"), "db", "version", "--config-file", str(conf)).stdout
    assert migrate.head() in version
    run(str(bin_dir / "placement-status"), "--config-file", str(conf), "upgrade", "check")

    assets = sorted(path.name for path in DASHBOARD.iterdir()
                    if path.suffix in (".js", ".css"))
    # The applications log each request to stdout; the report is the last line.
    report = json.loads(run(str(python), "-c", _INSTALLED_SCRIPT,
                            str(bin_dir / "placement-api"), *assets).stdout.splitlines()[-1])
    site = Path(run(str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))")
                .stdout.strip())
    assert all(Path(file).is_relative_to(site) for file in report["files"]), report["files"]
    for app in ("shim", "script"):
        answers = report[app]
        assert {path: status for path, (status, _) in answers.items()} == {
            path: "200 OK" for path in answers}, app
        # The page is index.html with its assets' names filled in; they are served as shipped.
        for name in assets:
            assert answers[f"/dashboard/static/{name}"][1] == _sha256(DASHBOARD / name), name
    # oslo.middleware names its own healthcheck backends in the same group.
    points = report["entry_points"]
    assert points["oslo.policy.policies"]["placement"] == "allotment.policy:list_rules"
    assert points["oslo.policy.enforcer"]["placement"] == "allotment.policy:get_enforcer"
    assert points["oslo.middleware.healthcheck"]["database"] == "allotment.health:DatabaseCheck"
    assert report["rules"] > 30
    assert report["enforcer"] and report["healthcheck"]
    # oslo.policy's own tool, reading the rules through the entry point.
    sample = run(str(bin_dir / "oslopolicy-sample-generator"), "--namespace", "placement").stdout
    assert '#"placement:resource_providers:list":' in sample
