"""Record upstream Placement 16.0.0's decisions behind a real Keystone.

    .venv/bin/python -m tests.keystone.record

starts Keystone 30.0.0 (``identity.py``), makes the callers (``cloud.py``),
runs upstream 16.0.0 under uwsgi from bench's venv (``bench/.upstream-venv``,
made on first use) once per policy setting, seeds it, and sends every request
of ``matrix.UPSTREAM_CALLS`` as every caller; then the ``openstack`` CLI
commands of ``matrix.CLI_COMMANDS`` with a password login. The statuses and
the CLI's output go to ``tests/data/keystone_decisions.json``, which
``test_real_keystone.py`` holds allotment to. Run it again when the matrix
changes (the test says so when a request has no recorded decision).
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.clients import sidebyside
from tests.keystone import cloud, matrix
from tests.keystone.identity import KEYSTONE_VERSION

DATA = Path(__file__).resolve().parents[1] / "data" / "keystone_decisions.json"
COMMAND = "python -m tests.keystone.record"


def _versions() -> dict[str, str]:
    python = str(sidebyside.UPSTREAM_VENV / "bin" / "python")
    script = ("import importlib.metadata as m, json; print(json.dumps({n: m.version(n) for n in "
              "('openstack-placement', 'keystonemiddleware', 'oslo.policy')}))")
    upstream = json.loads(subprocess.run([python, "-c", script], check=True,
                                         capture_output=True, text=True).stdout)
    return {**upstream, "keystone": KEYSTONE_VERSION,
            "python-openstackclient": importlib.metadata.version("python-openstackclient"),
            "osc-placement": importlib.metadata.version("osc-placement")}


def record(workdir: Path) -> dict[str, Any]:
    with cloud.running_keystone(workdir) as (keystone, made), \
            cloud.placements("upstream", workdir, keystone) as urls:
        cloud.seed(urls["default"], made)
        decisions = {
            policy: {caller: {key: answer.status for key, answer in answers.items()}
                     for caller, answers in cloud.decisions(url, made,
                                                            matrix.UPSTREAM_CALLS).items()}
            for policy, url in urls.items()}
        made.point_placement_at(urls["default"])
        cli = cloud.cli_outputs(made)
    return {"recorded_with": _versions(), "command": COMMAND,
            "decisions": decisions, "cli": cli}


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="keystone-record-") as workdir:
        data = record(Path(workdir))
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA} in {time.monotonic() - started:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
