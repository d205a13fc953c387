"""What a test does when something it needs is not installed: fail in CI (a
CI run must never pass by skipping what it was meant to test), skip on a
developer's machine."""

from __future__ import annotations

import os

import pytest


def require(missing: str | None, what: str, *, module: bool = False) -> None:
    """Fail under ``CI`` or skip when ``missing`` names what is not there."""
    if not missing:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{what}: {missing}", pytrace=False)
    pytest.skip(f"{what}: {missing}", allow_module_level=module)
