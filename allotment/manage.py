"""``placement-manage``: upstream's database command, run on allotment's schema.

Deployment tools (kolla-ansible, openstack-helm, OpenStack-Ansible, devstack)
run ``placement-manage db sync`` and ``placement-manage db
online_data_migrations`` as upstream ships them; this is that command with
openstack-placement 16.0.0's sub-commands, options, output and exit codes
(its ``placement/cmd/manage.py``)::

    placement-manage [--config-file PATH] [--config-dir DIR] [--debug] ... db sync
    placement-manage ... db version
    placement-manage ... db stamp <version>
    placement-manage ... db online_data_migrations [--max-count <number>]

Options and configuration files are oslo.config's, as upstream parses them:
without ``--config-file``, the first ``placement.conf`` (and
``placement-manage.conf``) found in ``~/.placement/``, ``~/``,
``/etc/placement/``, ``/etc/``, plus any ``placement.conf.d/`` found there.

What differs, on purpose:

- ``db sync`` runs allotment's migrations (Alembic, version table
  ``allotment_alembic_version``, revisions ``0001``, ``0002``, ...) and then
  adds the standard resource classes and traits. It leaves upstream's own
  ``alembic_version`` table at upstream's head, so upstream can read the
  database too.
- ``db version`` prints allotment's revision (``0004``), not upstream's
  (``a082b8bb98d0``); ``None`` for a database never synced.
- ``db stamp`` takes allotment's revision names (or ``head``).

Exit codes: 0 done; 1 a command that failed (no database, an unknown revision,
another application's database, a schema ``db sync`` has not made yet) or no
command at all (help printed); 2 an argument error (argparse, or a
configuration file that is missing or malformed), or from
``online_data_migrations``, migrations that failed while none made progress;
``online_data_migrations`` also answers 1 when ``--max-count`` was given and its
batch migrated rows (more may remain: run it again until 0), and 127 for a
``--max-count`` that is not a positive integer. A larger ``--max-count`` than
any table holds (``10**30``) means all rows, in one batch.

Whatever fails says so in one line on stderr, never a traceback (``--debug``
logs it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import logging
import sys
from collections.abc import Callable, Iterator

import prettytable
import sqlalchemy as sa
from oslo_config import cfg

from allotment import config
from allotment.db.engine import Database, write_transaction
from allotment.db.errors import one_line

LOG = logging.getLogger(__name__)

PROG = "placement-manage"

# Batch size of online_data_migrations when --max-count is not given (upstream's).
DEFAULT_BATCH = 50
# The most rows one batch is asked for: a LIMIT every database takes, and more
# rows than any Placement table holds.
MAX_BATCH = 2**31 - 1

# A step takes (connection, most rows to migrate) and answers (found, done).
Step = Callable[[sa.Connection, int], "tuple[int, int]"]


def version() -> str:
    return importlib.metadata.version("allotment")


def _say(line: str) -> None:
    print(f"{PROG}: {line}", file=sys.stderr, flush=True)


def _error(message: str) -> int:
    _say(message)
    return 1


@contextlib.contextmanager
def _database(conf: cfg.ConfigOpts) -> Iterator[Database]:
    """The configured database, once it answers (``[placement_database]
    max_retries``/``retry_interval``); ``RuntimeError`` when it never does."""
    from allotment.db.availability import GaveUp
    from allotment.db.setup import database_from_conf, wait_for_database

    db = database_from_conf(conf)
    try:
        try:
            wait_for_database(db, conf, _say)
        except GaveUp as exc:
            raise RuntimeError(str(exc)) from None
        yield db
    finally:
        db.dispose()


def _require_schema(db: Database) -> None:
    """``RuntimeError`` unless the schema is allotment's head: the data migrations'
    statements need its tables (not another application's, nor an empty database)."""
    from allotment.db import migrate

    with db.engine.connect() as conn:
        migrate.require_placement_database(conn)
    current, head = migrate.current(db.engine), migrate.head()
    if current != head:
        raise RuntimeError(f"the database schema is at revision {current}, not {head}: "
                           f'run "{PROG} db sync" first')


class DbCommands:
    """The ``db`` sub-commands; each returns the exit code."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf

    def sync(self) -> int:
        from allotment.db import migrate, standard_names

        with _database(self.conf) as db:
            migrate.upgrade(db.engine)
            standard_names.sync(db.engine)
        return 0

    def version(self) -> int:
        from allotment.db import migrate

        with _database(self.conf) as db:
            print(migrate.current(db.engine))
        return 0

    def stamp(self) -> int:
        from allotment.db import migrate

        with _database(self.conf) as db:
            migrate.stamp(db.engine, self.conf.command.version)
        return 0

    def online_data_migrations(self) -> int:
        given = self.conf.command.max_count
        if given is not None:
            try:
                max_count = int(given)
            except ValueError:
                max_count = -1
            if max_count < 1:
                print("Must supply a positive value for max_count")
                return 127
            max_count = min(max_count, MAX_BATCH)
            limited = True
        else:
            max_count, limited = DEFAULT_BATCH, False
            print(f"Running batches of {max_count} until complete")

        totals: dict[str, list[int]] = {}
        ran, failed = 0, False
        with _database(self.conf) as db:
            _require_schema(db)
            while True:
                batch, failed = self._batch(db, max_count)
                ran = 0
                for name, (found, done) in batch.items():
                    total = totals.setdefault(name, [0, 0])
                    total[0] += found
                    total[1] += done
                    ran += done
                if limited or ran == 0:
                    break

        table = prettytable.PrettyTable(["Migration", "Total Found", "Completed"])
        for name, (found, done) in totals.items():
            table.add_row([name, found, done])
        print(table)
        # With --max-count, a failure beside progress is not final: the rows
        # migrated may be what the failing step was waiting for.
        if failed and not (limited and ran):
            print("Some migrations failed unexpectedly. Check log for details.")
            return 2
        return 1 if ran else 0

    def _steps(self) -> list[tuple[str, Step]]:
        from allotment.ledger import unfinished_migrations as um

        placement = self.conf.placement

        def consumers(conn: sa.Connection, limit: int) -> tuple[int, int]:
            return um.create_incomplete_consumers(
                conn, limit, placement.incomplete_consumer_project_id,
                placement.incomplete_consumer_user_id)

        # Upstream's names and order (both added in Stein).
        return [("set_root_provider_ids", um.set_root_provider_ids),
                ("create_incomplete_consumers", consumers)]

    def _batch(self, db: Database, max_count: int) -> tuple[dict[str, tuple[int, int]], bool]:
        """Each step once, until ``max_count`` rows are done; (results by step, failed)."""
        results: dict[str, tuple[int, int]] = {}
        ran, failed = 0, False
        for name, step in self._steps():
            try:
                with write_transaction(db.engine) as conn:
                    found, done = step(conn, max_count - ran)
            except Exception as exc:
                print(f"Error attempting to run {name}")
                _say(f"{name}: {one_line(exc)}")
                LOG.debug("Error attempting to run %s", name, exc_info=True)
                failed, found, done = True, 0, 0
            if found:
                print(f"{found} rows matched query {name}, {done} migrated")
            results[name] = (found, done)
            ran += done
            if ran >= max_count:
                break
        return results, failed


def _add_db_parsers(subparsers: argparse._SubParsersAction, commands: DbCommands) -> None:
    # Not required: a bare "placement-manage" prints the help and exits 1.
    subparsers.required = False
    parser = subparsers.add_parser("db")
    parser.set_defaults(func=parser.print_help)
    db = parser.add_subparsers(description="database commands")

    def command(name: str, text: str, func: Callable[[], int]) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = db.add_parser(name, help=text, description=text)
        sub.set_defaults(func=func)
        return sub

    command("sync", "Sync the database to the current version.", commands.sync)
    command("version", "Report the current database version.", commands.version)
    stamp = command("stamp", "Stamp the revision table with the given version.",
                    commands.stamp)
    stamp.add_argument("version", help="the version to stamp")
    online = command("online_data_migrations", "Run the online data migrations.",
                     commands.online_data_migrations)
    online.add_argument("--max-count", metavar="<number>",
                        help="Maximum number of objects to consider")


def parse(argv: list[str]) -> tuple[cfg.ConfigOpts, DbCommands]:
    """placement.conf and the command line, as upstream's ``placement-manage`` reads them."""
    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    commands = DbCommands(conf)
    conf.register_cli_opt(cfg.SubCommandOpt(
        "db", dest="command", title="Command", help="Available DB commands",
        handler=lambda subparsers: _add_db_parsers(subparsers, commands)))
    conf(argv, project="placement", prog=PROG, version=version(), default_config_files=None)
    return conf, commands


def main(argv: list[str] | None = None) -> int:
    try:
        conf, _ = parse(sys.argv[1:] if argv is None else argv)
    except (cfg.Error, ValueError) as exc:  # a missing or malformed configuration file
        _say(f"cannot read the configuration: {one_line(exc)}")
        return 2
    try:
        func = conf.command.func
    except cfg.NoSuchOptError:
        conf.print_help()
        return 1
    try:
        return func() or 0
    except Exception as exc:  # the database, a revision: one line, not a traceback
        LOG.debug("%s failed", PROG, exc_info=True)
        return _error(one_line(exc))


if __name__ == "__main__":
    sys.exit(main())
