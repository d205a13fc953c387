"""Logging as placement.conf configures it: oslo.log's ``[DEFAULT]`` options.

``setup`` is called once per process before any request: by ``allotment
serve`` in the master before gunicorn forks (the workers inherit its
handlers, so a ``log_file`` receives every worker's lines), and by
``allotment.wsgi:application`` when uwsgi or another server loads us.
Without configuration: INFO and up to standard output, in oslo.log's format
(``[request-id user project ...]`` after the logger name).
"""

from __future__ import annotations

import logging

from oslo_config import cfg
from oslo_log import log

# The logger SQLAlchemy writes SQL to when ``connection_debug`` turns echo on.
SQL_LOGGER = "sqlalchemy.engine.Engine"


def setup(conf: cfg.ConfigOpts) -> None:
    """Apply placement.conf's logging options to this process's logging."""
    # oslo.log's ``default_log_levels`` already keeps the chatty libraries we
    # use (sqlalchemy, keystonemiddleware, keystoneauth, urllib3, stevedore)
    # at WARN, even with ``debug = True``; operators may list their own.
    log.setup(conf, "placement")
    # SQLAlchemy's echo (connection_debug = 100) adds its own stdout handler
    # to a logger that has none: give it one that passes records on to ours.
    sql_logger = logging.getLogger(SQL_LOGGER)
    if not sql_logger.handlers:
        sql_logger.addHandler(logging.NullHandler())
    logging.captureWarnings(True)
    if conf.debug:
        # Secret options (database URL, keystone passwords) show as ****.
        conf.log_opt_values(logging.getLogger(__name__), logging.DEBUG)
