"""``placement-api``: the WSGI script that upstream's pbr ``wsgi_scripts`` used to make.

openstack-placement up to 14.x installed ``bin/placement-api``, a Python file
that mod_wsgi (kolla-ansible's ``WSGIScriptAlias / .../bin/placement-api``,
the distributions' Apache sites) or uwsgi (``wsgi-file = .../placement-api``)
loads to find a module-level ``application``, and that, run directly, serves
the API on ``--port`` for a quick test. 15.0.0 dropped it for the module
``placement.wsgi.api:application``; tools written for the script still use it.

The installed script is a console script whose entry point is ``application``
below, so the file that pip writes reads::

    from allotment.wsgi_script import application
    if __name__ == "__main__":
        sys.exit(application())

Loaded by a WSGI server, the file's ``application`` is called with
``(environ, start_response)``: it is ``allotment.wsgi.application`` (placement.conf
from ``OS_PLACEMENT_CONFIG_DIR`` or ``/etc/placement``, read on the first
request). Run as a program it is called with no arguments and serves, with
pbr's options: ``--port``/``-p`` (8000), ``--host``/``-b`` (all addresses),
and after ``--`` the options for the application, here ``--config-file`` and
``--config-dir``. As ``allotment serve`` does, it refuses ``noauth2`` on an
address other than loopback.
"""

from __future__ import annotations

import argparse
import signal
import socketserver
import sys
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref import simple_server

from allotment import wsgi

PROG = "placement-api"


class _ThreadingServer(socketserver.ThreadingMixIn, simple_server.WSGIServer):
    daemon_threads = True


class _QuietHandler(simple_server.WSGIRequestHandler):
    """allotment logs each request itself (allotment.http.requestlog)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="The Placement API on a small test server "
                               "(production: mod_wsgi, uwsgi or allotment serve).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        usage="%(prog)s [-h] [--port PORT] [--host IP] -- [passed options]")
    parser.add_argument("--port", "-p", type=int, default=8000, help="TCP port to listen on")
    parser.add_argument("--host", "-b", default="", help="IP to bind the server to")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- [passed options]",
                        help="'--', then options for the application: --config-file "
                             "PATH, --config-dir DIR (each repeatable)")
    return parser


def _app_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"{PROG} ... --")
    parser.add_argument("--config-file", action="append", default=[])
    parser.add_argument("--config-dir", action="append", default=[])
    return parser


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(argv: list[str]) -> int:
    """Run as a program: serve the API (one process, a thread per request) until
    interrupted."""
    from allotment import config, logs
    from allotment.cli import _is_loopback

    parser = _parser()
    args = parser.parse_args(argv)
    passed = list(args.args)
    if passed and passed[0] == "--":
        passed.pop(0)
    elif passed:
        parser.error("unrecognized arguments: " + " ".join(passed))
    app_args = _app_parser().parse_args(passed)
    conf = config.load(app_args.config_file or None, app_args.config_dir)
    if conf.api.auth_strategy == "noauth2" and not _is_loopback(args.host):
        print(f"{PROG}: refusing to serve auth_strategy=noauth2 on "
              f"{args.host or 'every address'}: anyone could act as admin. Pass "
              "--host 127.0.0.1, or use keystone.", file=sys.stderr)
        return 2
    logs.setup(conf)
    server = simple_server.make_server(args.host, args.port, wsgi.make_app(conf),
                                       server_class=_ThreadingServer,
                                       handler_class=_QuietHandler)
    host = args.host or "0.0.0.0"
    print(f"{PROG}: serving the Placement API on http://{host}:{server.server_port}/ "
          "(a test server: in production use mod_wsgi, uwsgi or allotment serve)",
          flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop: as ^C
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


class _Script:
    """WSGI application when called with two arguments, the test server with none."""

    def __call__(self, environ: dict[str, Any] | None = None,
                 start_response: Callable[..., Any] | None = None) -> Iterable[bytes] | int:
        if environ is None or start_response is None:
            return serve(sys.argv[1:])
        return wsgi.application(environ, start_response)


application = _Script()
