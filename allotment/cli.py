"""The ``allotment`` command: argument parsing only; work happens elsewhere.

``serve``, ``db``, ``status`` and ``audit`` (``allotment.audit_cli``: exit
status 0 when nothing is found, 1 with findings, 2 when it cannot run).

A command that cannot do its work says why in one line on stderr, never a
traceback: a configuration file that is missing or malformed (exit 2; 255 for
``status``, oslo.upgradecheck's "the checks could not run"), a database that
cannot be reached or is another application's, an SQL error (exit 1).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import ipaddress
import logging
import os
import sys
from typing import TYPE_CHECKING

import platformdirs
from oslo_config import cfg

from allotment import config

if TYPE_CHECKING:
    from allotment.db.engine import Database


def _default_sqlite_url() -> str:
    data_dir = platformdirs.user_data_dir("allotment")
    return "sqlite:///" + os.path.join(data_dir, "placement.sqlite")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def error_line(exc: BaseException) -> str:
    from allotment.db.errors import one_line

    return one_line(exc)


def _say(line: str) -> None:
    print(f"allotment: {line}", file=sys.stderr, flush=True)


class ConfigurationError(Exception):
    """placement.conf could not be read (missing, malformed, a bad value)."""


def _load_conf(args: argparse.Namespace) -> cfg.ConfigOpts:
    try:
        return _read_conf(args)
    except (cfg.Error, ValueError, OSError) as exc:
        raise ConfigurationError(error_line(exc)) from None


def _read_conf(args: argparse.Namespace) -> cfg.ConfigOpts:
    files = args.config_file if args.config_file else None
    conf = config.load(files, args.config_dir or [])
    if files is None and not config.default_config_files():
        # No configuration at all: a self-contained local service.
        conf.set_default("auth_strategy", "noauth2", group="api")
        conf.set_default("sync_on_startup", True, group="placement_database")
    if getattr(args, "database_url", None):
        conf.set_override("connection", args.database_url, group="placement_database")
        conf.set_override("sync_on_startup", True, group="placement_database")
    if not conf.placement_database.connection:
        conf.set_override("connection", _default_sqlite_url(), group="placement_database")
        conf.set_override("sync_on_startup", True, group="placement_database")
    return conf


def _default_workers() -> int:
    return max(2, os.cpu_count() or 1)


def cmd_serve(args: argparse.Namespace) -> int:
    from allotment import logs, metrics, server, wsgi
    from allotment.db.engine import make_url
    from allotment.db.setup import database_from_conf, prepare_database

    conf = _load_conf(args)
    if conf.api.auth_strategy == "noauth2" and not _is_loopback(args.host) \
            and not args.allow_noauth_remote:
        print(f"refusing to serve auth_strategy=noauth2 on non-loopback address "
              f"{args.host}: anyone could act as admin. Use keystone, or pass "
              "--allow-noauth-remote if you really mean it.", file=sys.stderr)
        return 2
    try:
        extra_listen = _metrics_listener(conf)
        _check_headroom_requests(conf)
    except ValueError as exc:
        print(f"allotment: {exc}", file=sys.stderr)
        return 2
    logs.setup(conf)  # in the master: the forked workers inherit its handlers
    db = database_from_conf(conf)
    if not _database_reachable(db, conf):
        return 1
    try:
        prepare_database(db, conf)
    except Exception as exc:  # another application's database, an SQL error
        _say(error_line(exc))
        return 1
    finally:
        db.dispose()
    url = make_url(conf.placement_database.connection)
    shown = url.render_as_string(hide_password=True)

    def ready() -> None:
        print(f"allotment: serving the Placement API on http://{args.host}:{args.port} "
              f"(database {shown}, auth {conf.api.auth_strategy}, "
              f"{args.workers} workers x {args.threads} threads)", flush=True)

    metrics.prepare_server(conf)  # before the workers fork
    server.serve(lambda: wsgi.make_app(conf, prepare=False), args.host, args.port,
                 args.workers, args.threads,
                 log_level="debug" if conf.debug else "info", on_ready=ready,
                 limits=server.ConnectionLimits.from_conf(conf),
                 extra_listen=extra_listen, child_exit=metrics.worker_exited)
    return 0


def _metrics_listener(conf: cfg.ConfigOpts) -> list[tuple[str, int]]:
    """The separate /metrics listener, when ``[allotment] metrics_listen`` names one."""
    from allotment.metrics.exposition import parse_listen

    listen = parse_listen(conf.allotment.metrics_listen) if conf.allotment.metrics else None
    return [listen] if listen else []


def _check_headroom_requests(conf: cfg.ConfigOpts) -> None:
    """``ValueError`` naming a bad ``[allotment] headroom_requests`` entry, before
    serving (the workers would each fail on it)."""
    from allotment.metrics.headroom import parse_shapes

    if conf.allotment.metrics:
        parse_shapes(conf.allotment.headroom_requests)


def _database_reachable(db: Database, conf: cfg.ConfigOpts) -> bool:
    """Wait for the database at start (one line while waiting); False: it never came."""
    from allotment.db.availability import GaveUp
    from allotment.db.setup import wait_for_database

    def say(line: str) -> None:
        print(f"allotment: {line}", file=sys.stderr, flush=True)

    try:
        wait_for_database(db, conf, say)
    except GaveUp as exc:
        say(str(exc))
        db.dispose()
        return False
    return True


def cmd_db(args: argparse.Namespace) -> int:
    from allotment.db import migrate, standard_names
    from allotment.db.setup import database_from_conf

    conf = _load_conf(args)
    db = database_from_conf(conf)
    if not _database_reachable(db, conf):
        return 1
    try:
        if args.db_command in ("upgrade", "sync"):
            migrate.upgrade(db.engine)
            standard_names.sync(db.engine)
            print(f"database at revision {migrate.current(db.engine)}")
        elif args.db_command == "version":
            print(migrate.current(db.engine) or "None")
    except Exception as exc:  # another application's database, an SQL error
        _say(error_line(exc))
        return 1
    finally:
        db.dispose()
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from allotment import upgradecheck

    return upgradecheck.run(_load_conf(args))


def cmd_audit(args: argparse.Namespace) -> int:
    from allotment import audit_cli

    try:
        kinds = audit_cli.parse_kinds(args.kind)
        limit = audit_cli.check_limit(args.limit)
    except ValueError as exc:
        print(f"allotment audit: {exc}", file=sys.stderr)
        return audit_cli.ERROR
    return audit_cli.run(_load_conf(args), kinds, limit, args.format)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="allotment",
                                     description="OpenStack Placement API service")
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {importlib.metadata.version('allotment')}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config-file", action="append", default=[],
                        help="placement.conf to read (repeatable)")
    common.add_argument("--config-dir", action="append", default=[],
                        help="directory of *.conf files to read (repeatable)")
    common.add_argument("--database-url", help="override [placement_database] connection")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", parents=[common], help="serve the API")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8778)
    serve.add_argument("--workers", type=int, default=_default_workers(),
                       help="worker processes (default: number of CPUs, at least 2)")
    serve.add_argument("--threads", type=int, default=4, help="threads per worker")
    serve.add_argument("--allow-noauth-remote", action="store_true",
                       help="allow noauth2 on a non-loopback address")
    serve.set_defaults(func=cmd_serve)

    db = sub.add_parser("db", parents=[common], help="database schema")
    db.add_argument("db_command", choices=["upgrade", "sync", "version"])
    db.set_defaults(func=cmd_db)

    status = sub.add_parser("status", parents=[common], help="upgrade readiness checks")
    status.add_argument("status_command", choices=["upgrade"])
    status.add_argument("check", choices=["check"])
    status.set_defaults(func=cmd_status)

    audit = sub.add_parser(
        "audit", parents=[common],
        help="list what looks wrong in the database now (changes nothing)",
        description="List what looks wrong in the database now, each finding with its "
                    "evidence and history: over_capacity, empty_consumer, old_migration, "
                    "allocation_without_inventory, incomplete_consumer. Exit status: 0 "
                    "nothing found, 1 findings, 2 the audit could not run.")
    audit.add_argument("--format", choices=["table", "json"], default="table",
                       help="table (one line per finding) or json (GET /audit/allocations' "
                            "body); default table")
    audit.add_argument("--kind", action="append", metavar="KIND",
                       help="only findings of this kind (repeatable or comma-separated; "
                            "counts cover every kind)")
    audit.add_argument("--limit", type=int,
                       help="findings of each kind at most, 1 to 1000 (default 100)")
    audit.set_defaults(func=cmd_audit)
    return parser


# Exit status when placement.conf cannot be read, per command (else 2, as argparse).
_CONFIGURATION_EXIT = {"status": 255}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING,
                        format="%(asctime)s %(process)d %(levelname)s %(name)s %(message)s")
    try:
        return args.func(args)
    except ConfigurationError as exc:
        _say(f"cannot read the configuration: {exc}")
        return _CONFIGURATION_EXIT.get(args.command, 2)


if __name__ == "__main__":
    sys.exit(main())
