"""Stands in for ``placement.tests.fixtures``: a fresh placement database.

Upstream's ``Database(conf_fixture, set_config=False)`` builds placement's
schema on ``[placement_database] connection`` (in-RAM SQLite unless set) for
the fixture's life. Here allotment's migrations and standard names make the
schema; an in-RAM URL becomes a SQLite file in a directory of the fixture's
own, since allotment's engine pools connections and every connection to
``sqlite://`` would be another, empty database. nova's threading mode sets a
file URL of its own first (``_configure_placement``): that file is used.
"""

from __future__ import annotations

import contextlib
import os

import fixtures
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from sqlalchemy.engine import make_url

from allotment.db import migrate, standard_names
from allotment.db.engine import create_engine


def _in_memory(url: str | None) -> bool:
    if not url:
        return True
    parsed = make_url(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


class Database(fixtures.Fixture):
    """A database with allotment's schema, new for each use of the fixture."""

    def __init__(self, conf_fixture: config_fixture.Config, set_config: bool = False) -> None:
        super().__init__()
        self.conf_fixture = conf_fixture
        self.set_config = set_config
        self.url = ""

    def _setUp(self) -> None:
        if self.set_config:
            # Registered already when allotment's options are.
            with contextlib.suppress(cfg.DuplicateOptError):
                self.conf_fixture.register_opt(cfg.StrOpt("connection"),
                                               group="placement_database")
        url = self.conf_fixture.conf.placement_database.connection
        if _in_memory(url):
            directory = self.useFixture(fixtures.TempDir()).path
            url = "sqlite:///" + os.path.join(directory, "placement.sqlite")
            self.conf_fixture.config(connection=url, group="placement_database")
        engine = create_engine(url)
        try:
            migrate.upgrade(engine)
            standard_names.sync(engine)
        finally:
            engine.dispose()
        self.url = url
