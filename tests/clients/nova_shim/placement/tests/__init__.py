"""Stands in for ``placement.tests``."""
