"""Stands in for upstream Placement's package in nova's functional tests.

Only the modules nova 34.0.0's functional tests import are here, each backed
by allotment (its WSGI application in-process, its schema on a fresh SQLite
database):

- ``placement.conf``: ``register_opts``;
- ``placement.tests.fixtures``: ``Database``;
- ``placement.tests.functional.fixtures.placement``: ``PlacementFixture``,
  which nova's own ``PlacementFixture`` subclasses.

This directory goes on the import path of that run only
(``tests/clients/test_nova_functional.py``), whose venv has no upstream
Placement: an ``import placement`` there finds this package and nothing else.
"""
