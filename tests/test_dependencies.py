"""pyproject.toml's dependency ranges against the versions they must admit.

Two sets of exact versions must fall inside every range that pyproject.toml
declares (runtime and test extras): constraints.txt, the set CI installs, and
OpenStack's upper-constraints (tests/data/upper-constraints.txt, the master
branch of openstack/requirements; its first lines say which commit), so that
allotment installs beside the OpenStack services of a deployment. A package
upper-constraints does not list (orjson, psycopg, the linters) is not checked
against it. The last test lets pip resolve allotment's runtime dependencies
under upper-constraints, transitive ones included, without installing anything
(it reads the package index: deselect with -m 'not network' when offline).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest's own dependency there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CONSTRAINTS = ROOT / "constraints.txt"
UPPER_CONSTRAINTS = ROOT / "tests" / "data" / "upper-constraints.txt"

# Shared with OpenStack's services, so upper-constraints must list them: a
# renamed or dropped entry would otherwise turn the check into a skip.
SHARED = ("sqlalchemy", "alembic", "pymysql", "keystonemiddleware", "oslo-config",
          "oslo-policy", "oslo-middleware", "oslo-log", "oslo-upgradecheck",
          "oslo-context", "os-traits", "os-resource-classes", "microversion-parse",
          "webob", "jsonschema", "falcon", "gunicorn", "waitress")


def declared() -> list[tuple[str, Requirement]]:
    """Each requirement of pyproject.toml, with where it is declared."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    found = [("dependencies", Requirement(text)) for text in project["dependencies"]]
    for extra, texts in project.get("optional-dependencies", {}).items():
        found += [(f"[{extra}]", Requirement(text)) for text in texts]
    return found


def pins(text: str) -> dict[NormalizedName, Version]:
    """``name==version`` (or ``===``) lines, each with a marker true here, by name.

    Comments, blank lines and options (``-c``, ``--index-url``) are passed over.
    """
    found: dict[NormalizedName, Version] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement as exc:
            raise ValueError(f"not a requirement: {raw!r}") from exc
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        exact = [spec for spec in requirement.specifier if spec.operator in ("==", "===")]
        if len(exact) != 1 or len(requirement.specifier) != 1:
            raise ValueError(f"not one exact version: {raw!r}")
        found[canonicalize_name(requirement.name)] = Version(exact[0].version)
    return found


def outside(requirements: list[tuple[str, Requirement]],
            versions: dict[NormalizedName, Version]) -> list[str]:
    """The requirements whose range excludes the version ``versions`` gives them.

    A requirement ``versions`` does not name, or whose marker is false here, is
    not checked.
    """
    problems = []
    for where, requirement in requirements:
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        version = versions.get(canonicalize_name(requirement.name))
        if version is not None and not requirement.specifier.contains(version, prereleases=True):
            problems.append(f"{requirement} ({where}) excludes {requirement.name} {version}")
    return problems


def test_upper_constraints_fall_within_our_ranges() -> None:
    problems = outside(declared(), pins(UPPER_CONSTRAINTS.read_text()))
    assert not problems, "OpenStack's upper-constraints:\n" + "\n".join(problems)


def test_upper_constraints_list_the_shared_libraries() -> None:
    upper = pins(UPPER_CONSTRAINTS.read_text())
    ours = {canonicalize_name(requirement.name) for _, requirement in declared()}
    assert [name for name in SHARED if name not in upper or name not in ours] == []


def test_constraints_fall_within_our_ranges() -> None:
    problems = outside(declared(), pins(CONSTRAINTS.read_text()))
    assert not problems, "constraints.txt:\n" + "\n".join(problems)


def test_constraints_pin_every_declared_package() -> None:
    pinned = pins(CONSTRAINTS.read_text())
    missing = sorted({str(requirement.name) for _, requirement in declared()
                      if canonicalize_name(requirement.name) not in pinned})
    assert missing == []
    assert "allotment" not in pinned


def test_the_copy_of_upper_constraints_names_its_source() -> None:
    header = UPPER_CONSTRAINTS.read_text()[:1000]
    assert re.search(r"^# commit [0-9a-f]{40} \(\d{4}-\d{2}-\d{2}\)", header, re.MULTILINE)


def test_a_range_that_excludes_a_pin_is_reported() -> None:
    versions = pins("SQLAlchemy===2.0.52\noslo.config===10.7.0;python_version<'3'\n# a note\n")
    assert versions == {"sqlalchemy": Version("2.0.52")}
    requirements = [("dependencies", Requirement("sqlalchemy>=2.1")),
                    ("dependencies", Requirement("oslo_config>=99")),
                    ("[test]", Requirement("SQLAlchemy<3"))]
    assert outside(requirements, versions) == [
        "sqlalchemy>=2.1 (dependencies) excludes sqlalchemy 2.0.52"]


@pytest.mark.network
def test_pip_resolves_our_dependencies_under_upper_constraints(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # The index's metadata only; measured at about 25 s with an empty pip cache.
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
         "--quiet", "--disable-pip-version-check", "--report", str(report),
         "-c", str(UPPER_CONSTRAINTS), str(ROOT)],
        capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    chosen = {canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"])
              for item in json.loads(report.read_text())["install"]}
    upper = pins(UPPER_CONSTRAINTS.read_text())
    assert "allotment" in chosen
    assert {name: version for name, version in chosen.items()
            if name in upper and upper[name] != version} == {}
