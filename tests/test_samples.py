"""The committed sample files are what the generators write from the code now.

``etc/allotment/placement.conf.sample`` (oslo-config-generator, every option of
allotment and of the libraries it configures) and
``etc/allotment/policy.yaml.sample`` (oslopolicy-sample-generator, every policy
rule): an option or rule changed without regenerating its sample fails here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ETC = ROOT / "etc" / "allotment"
BIN = Path(sys.executable).parent

SAMPLES = [
    pytest.param("oslo-config-generator", "config-generator.conf", "placement.conf.sample",
                 id="placement.conf"),
    pytest.param("oslopolicy-sample-generator", "policy-generator.conf", "policy.yaml.sample",
                 id="policy.yaml"),
]


@pytest.mark.parametrize(("tool", "generator_conf", "sample"), SAMPLES)
def test_sample_is_current(tool: str, generator_conf: str, sample: str, tmp_path: Path) -> None:
    written = tmp_path / sample
    subprocess.run([str(BIN / tool), "--config-file", str(ETC / generator_conf),
                    "--output-file", str(written)],
                   cwd=ROOT, check=True, capture_output=True, text=True, timeout=120)
    assert written.read_text() == (ETC / sample).read_text(), (
        f"etc/allotment/{sample} is not what the code generates now; regenerate it with "
        f".venv/bin/{tool} --config-file etc/allotment/{generator_conf}")


def _registered(conf: object) -> set[tuple[str, str]]:
    return {("DEFAULT", name) for name in conf._opts} | {  # type: ignore[attr-defined]
        (group, name) for group, found in conf._groups.items()  # type: ignore[attr-defined]
        for name in found._opts}


def test_config_namespace_lists_every_option_we_register() -> None:
    """list_opts (the sample's and the docs' source) misses none of our options:
    what register_opts adds beyond oslo.config's and oslo.log's own."""
    from oslo_config import cfg
    from oslo_log import log

    from allotment import config

    ours, libraries = cfg.ConfigOpts(), cfg.ConfigOpts()
    config.register_opts(ours)
    log.register_options(libraries)
    listed = {(group, opt.dest) for group, opts in config.list_opts() for opt in opts}
    assert listed == _registered(ours) - _registered(libraries)
    assert [group for group, _ in config.list_opts()] == [
        "DEFAULT", "api", "placement", "placement_database", "workarounds", "allotment"]
