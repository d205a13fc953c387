"""The alert rules the metrics page includes are valid Prometheus rules, and
name only metrics allotment exposes."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.needs import require

RULES = Path(__file__).parents[1] / "doc" / "source" / "operating" / "allotment-alerts.rules.yml"
PAGE = RULES.parent / "metrics.md"


def test_promtool_accepts_the_rules() -> None:
    promtool = shutil.which("promtool")
    require(None if promtool else "promtool is not installed (apt-get install prometheus)",
            "needed to check the alert rules")
    assert promtool is not None
    checked = subprocess.run([promtool, "check", "rules", str(RULES)],
                             capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_rules_name_only_documented_metrics() -> None:
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", PAGE.read_text(), flags=re.M))
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    used = {name for rule in rules
            for name in re.findall(r"\b((?:placement|allotment)_[a-z_]+)", rule["expr"])}
    # Histograms are queried through their series.
    used = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert used <= documented, used - documented
