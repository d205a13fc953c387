"""``allotment --version``: the installed package's version, as pip knows it."""

from __future__ import annotations

import importlib.metadata

import pytest

from allotment import cli


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"allotment {importlib.metadata.version('allotment')}\n"
