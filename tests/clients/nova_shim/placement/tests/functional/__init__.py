"""Stands in for ``placement.tests.functional``."""
