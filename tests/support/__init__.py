"""Helpers for the tests, not tests themselves (pytest collects nothing here).

The in-process HTTP client, builders of clouds and claims, writer threads and
processes, private database servers and a Galera cluster, hostile inputs and
clients; some also run on their own for figures (``python -m tests.support.X``).
"""
