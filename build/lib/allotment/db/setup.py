"""The service's database from placement.conf, and its preparation on start.

Only the database layer: ``allotment db`` and ``allotment status`` use this
without loading the web stack.
"""

from __future__ import annotations

from collections.abc import Callable

from oslo_config import cfg

from allotment.db import availability, migrate, standard_names
from allotment.db.engine import Database, create_engine


def database_from_conf(conf: cfg.ConfigOpts) -> Database:
    db_conf = conf.placement_database
    if not db_conf.connection:
        raise RuntimeError("[placement_database] connection is not set")
    engine = create_engine(
        db_conf.connection,
        sqlite_synchronous=db_conf.sqlite_synchronous,
        pool_size=db_conf.max_pool_size,
        max_overflow=db_conf.max_overflow,
        pool_timeout=db_conf.pool_timeout,
        recycle=db_conf.connection_recycle_time,
        echo=db_conf.connection_debug >= 100,
    )
    return Database(engine)


def wait_for_database(db: Database, conf: cfg.ConfigOpts,
                      say: Callable[[str], None]) -> None:
    """Wait until the database answers, as ``[placement_database] max_retries`` and
    ``retry_interval`` allow; ``availability.GaveUp`` (one line) when it does not."""
    db_conf = conf.placement_database
    availability.wait_until_reachable(db.engine, db_conf.max_retries,
                                      db_conf.retry_interval, say)


def prepare_database(db: Database, conf: cfg.ConfigOpts) -> None:
    """Schema upgrade (when configured) and the standard names sync."""
    if conf.placement_database.sync_on_startup:
        migrate.upgrade(db.engine)
    standard_names.sync(db.engine)
