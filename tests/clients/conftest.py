"""Markers of the live-server client tests."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "sidebyside: compares allotment with upstream Placement 16.0.0 side by side "
        "(starts both servers; deselect with -m 'not sidebyside')")
    config.addinivalue_line(
        "markers",
        "clients: runs a real client's own tests (openstacksdk, nova, ...) against "
        "allotment, live or in-process (deselect with -m 'not clients')")
    config.addinivalue_line(
        "markers",
        "mixed: upstream Placement 16.0.0 and allotment serving one PostgreSQL/MariaDB "
        "database at once (deselect with -m 'not mixed')")
