"""``allotment status upgrade check`` and ``placement-status upgrade check``: is
this database ready for this release?

oslo.upgradecheck's table and exit codes (0 success, 1 warning, 2 failure,
255 when a check cannot run). When the checks cannot run (no database
configured, the database out of reach), oslo.upgradecheck's runner, and so
upstream's ``placement-status``, prints ``Error:`` and a traceback on stdout;
this prints one line on stderr saying why, with the same 255.

upstream ``placement-status``'s checks, with
its result levels (missing root provider ids: failure; incomplete
consumers: warning; a JSON policy file: failure, oslo.upgradecheck's common
check), after ours: the schema at allotment's head revision (failure).

``placement-status`` (``main``) is the same check under upstream's name, with
upstream's command line: oslo.config's options (``--config-file``,
``--config-dir``, ...) and configuration search, and oslo.upgradecheck's
``upgrade check [--json]``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import sqlalchemy as sa
from oslo_config import cfg
from oslo_upgradecheck import common_checks, upgradecheck
from oslo_upgradecheck.upgradecheck import Code, Result

from allotment import config
from allotment.db import migrate
from allotment.db.engine import Database
from allotment.db.errors import one_line
from allotment.db.setup import database_from_conf
from allotment.ledger import unfinished_migrations

# Failure exit code when a check itself fails to run (oslo.upgradecheck's).
ERROR = 255

_DATA_MIGRATIONS = ('Run "placement-manage db online_data_migrations" of the Placement '
                    "release that wrote this database.")


class Checks(upgradecheck.UpgradeCommands):
    """The checks, each a Result; ``check()`` prints the table, returns the worst."""

    def __init__(self, conf: cfg.ConfigOpts, db: Database | None = None) -> None:
        self.conf = conf
        self._db = db

    @property
    def db(self) -> Database:
        """``conf``'s database, opened on first use (after the command line is read)."""
        if self._db is None:
            self._db = database_from_conf(self.conf)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.dispose()
            self._db = None

    def _schema(self) -> Result:
        current, head = migrate.current(self.db.engine), migrate.head()
        if current != head:
            return Result(Code.FAILURE,
                          f"The schema is at revision {current}, this release needs "
                          f'{head}: run "allotment db upgrade" (or "placement-manage db sync").')
        return Result(Code.SUCCESS, f"At revision {current}.")

    def _unfinished(self, count: Callable[[sa.Connection], int], level: Code,
                    what: str) -> Result:
        """``level`` when ``count(conn)`` finds rows an online migration left, else success."""
        with self.db.read() as conn:
            if not unfinished_migrations.has_tables(conn):
                return Result(Code.SUCCESS, "No Placement tables yet.")
            missing = count(conn)
        if missing:
            return Result(level, f"{missing} {what}. " + _DATA_MIGRATIONS)
        return Result(Code.SUCCESS)

    def _root_provider_ids(self) -> Result:
        return self._unfinished(unfinished_migrations.providers_without_root, Code.FAILURE,
                                "resource provider(s) have no root provider id")

    def _incomplete_consumers(self) -> Result:
        return self._unfinished(unfinished_migrations.consumers_missing, Code.WARNING,
                                "consumer(s) with allocations have no consumers table record")

    def _policy_file(self) -> Result:
        return common_checks.check_policy_json(self, self.conf)

    _upgrade_checks = (
        ("Database schema", _schema),
        ("Missing Root Provider IDs", _root_provider_ids),
        ("Incomplete Consumers", _incomplete_consumers),
        ("Policy File JSON to YAML Migration", _policy_file),
    )


def run(conf: cfg.ConfigOpts, checks: Checks | None = None,
        prog: str = "allotment status") -> int:
    """Run the checks on ``conf``'s database; print the table; the exit code."""
    checks = checks or Checks(conf)
    try:
        return int(checks.check())
    except Exception as exc:
        # oslo.upgradecheck's code for "could not run", which no check result
        # uses; the reason in one line (its runner prints a traceback).
        print(f"{prog}: the checks could not run: {one_line(exc)}", file=sys.stderr)
        return ERROR
    finally:
        checks.close()


def main(argv: list[str] | None = None) -> int:
    """``placement-status``: upstream's command line, these checks."""
    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    checks = Checks(conf)
    upgradecheck.register_cli_options(conf, checks)
    try:
        conf(sys.argv[1:] if argv is None else argv, project="placement",
             prog="placement-status", default_config_files=None)
    except (cfg.Error, ValueError) as exc:
        print(f"placement-status: cannot read the configuration: {one_line(exc)}",
              file=sys.stderr)
        return ERROR
    # oslo.upgradecheck reads --json from its module's CONF (set by its own main,
    # which upstream does not call: there --json is accepted and ignored).
    upgradecheck.CONF = conf
    return run(conf, checks, prog="placement-status")


if __name__ == "__main__":
    sys.exit(main())
