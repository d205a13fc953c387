"""Configuration: upstream Placement's option names and groups via oslo.config.

An operator's existing ``placement.conf`` (and ``OS_<GROUP>__<OPTION>``
environment overrides, which oslo.config reads itself) configure allotment
unchanged. Options owned by libraries ([oslo_policy], [cors],
[keystone_authtoken]) are registered by those libraries when they are used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from oslo_config import cfg

API_OPTS = [
    cfg.StrOpt(
        "auth_strategy",
        default="keystone",
        choices=[("keystone", "Use Keystone for authentication."),
                 ("noauth2", "No authentication; identity from request headers.")],
        help="How incoming requests are authenticated.",
    ),
]

PLACEMENT_OPTS = [
    cfg.BoolOpt("randomize_allocation_candidates", default=False,
                help="Return allocation candidates in a random order."),
    cfg.StrOpt("incomplete_consumer_project_id",
               default="00000000-0000-0000-0000-000000000000",
               help="Project id recorded for consumers created before 1.8."),
    cfg.StrOpt("incomplete_consumer_user_id",
               default="00000000-0000-0000-0000-000000000000",
               help="User id recorded for consumers created before 1.8."),
    cfg.IntOpt("allocation_conflict_retry_count", default=10, min=0,
               help="How often a provider generation race on an allocation write is "
                    "retried inside the service before answering 409."),
    cfg.IntOpt("max_allocation_candidates", default=-1, min=-1,
               help="Most allocation candidates generated per request; -1 for no cap."),
    cfg.StrOpt("allocation_candidates_generation_strategy", default="depth-first",
               choices=["depth-first", "breadth-first"],
               help="Order in which candidates across roots are generated when capped."),
]

DATABASE_OPTS = [
    cfg.StrOpt("connection", secret=True, help="SQLAlchemy URL of the placement database."),
    cfg.BoolOpt("sqlite_synchronous", default=True,
                help="If False, SQLite does not fsync on commit (faster, less durable)."),
    cfg.StrOpt("slave_connection", secret=True, help="Accepted for compatibility; unused."),
    cfg.StrOpt("mysql_sql_mode", default="TRADITIONAL", help="SQL mode for MySQL sessions."),
    cfg.IntOpt("connection_recycle_time", default=3600,
               help="Seconds after which a pooled connection is replaced."),
    cfg.IntOpt("max_pool_size", min=0, help="Pool size; unset for the driver default."),
    cfg.IntOpt("max_retries", default=10, min=-1,
               help="Attempts to connect to the database at start (-1: forever)."),
    cfg.IntOpt("retry_interval", default=10, help="Seconds between connection attempts."),
    cfg.IntOpt("max_overflow", min=0, help="Connections allowed beyond the pool size."),
    cfg.IntOpt("connection_debug", default=0, min=0, max=100,
               help="SQL debug level: 0 none, 50 warnings, 100 every statement."),
    cfg.BoolOpt("connection_trace", default=False, help="Accepted for compatibility; unused."),
    cfg.IntOpt("pool_timeout", min=0, help="Seconds to wait for a pooled connection."),
    cfg.BoolOpt("sync_on_startup", default=False,
                help="Create or upgrade the schema when the service starts."),
]

WORKAROUNDS_OPTS = [
    cfg.BoolOpt("optimize_for_wide_provider_trees", default=False,
                help="Accepted for compatibility; allotment's candidate engine needs no "
                     "such switch."),
]

DEFAULT_OPTS = [
    cfg.StrOpt("tempdir", help="Temporary working directory."),
    cfg.StrOpt("pybasedir", default=os.path.dirname(os.path.abspath(__file__)),
               sample_default="<Path>", help="Directory of the allotment package."),
    cfg.StrOpt("state_path", default="$pybasedir", help="Top-level state directory."),
]

# Ours, not upstream's: how the server defends itself and what it shows.
ALLOTMENT_OPTS = [
    # Limits (the HTTP layer and the request parser enforce them).
    cfg.IntOpt("max_request_body_size", default=10 * 1024 * 1024, min=1024,
               help="Largest request body accepted, in bytes; larger ones get 413."),
    cfg.IntOpt("max_query_string_length", default=32 * 1024, min=256,
               help="Longest query string accepted, in bytes; longer ones get 414."),
    cfg.IntOpt("max_request_header_size", default=64 * 1024, min=1024,
               help="Largest request line plus headers accepted, in bytes; larger "
                    "ones get 431."),
    cfg.IntOpt("own_routes_slots", default=2, min=1,
               help="Requests to allotment's own read routes (the dashboard's API, "
                    "/history, /audit, /headroom, explain) "
                    "each worker process serves at once; one more is refused at once "
                    "with 503 and Retry-After, so that they never hold every thread and "
                    "the Placement API (claims, candidates, nova's polls) is always "
                    "served. Keep it below --threads."),
    cfg.IntOpt("max_json_depth", default=32, min=4,
               help="Deepest nesting of arrays and objects accepted in a JSON body; "
                    "deeper ones get 400."),
    # Timeouts (the server's I/O layer; no application thread waits on a client).
    cfg.IntOpt("request_timeout", default=30, min=1,
               help="Seconds a client has to send a whole request (line, headers and "
                    "body) once it has started; then the connection is closed."),
    cfg.IntOpt("keepalive_timeout", default=5, min=0,
               help="Seconds an idle keep-alive connection is kept open."),
    cfg.IntOpt("connection_limit", default=4096, min=16,
               help="Open client connections each worker process accepts."),
    # The candidates' read model.
    cfg.StrOpt("candidates_source", default="model", choices=["model", "database"],
               help="What GET /allocation_candidates answers from: 'model', each "
                    "worker's in-memory read model, kept current through the change log "
                    "that the database's triggers fill; or 'database', a copy of the same "
                    "data loaded from the tables for each request and dropped after it "
                    "(no memory kept between requests, at the cost of the load: about "
                    "0.3 s and 20 MiB per request at 10,000 providers)."),
    # What one candidates search may cost (allotment.candidates.budget).
    cfg.IntOpt("candidates_max_entries", default=1_000_000, min=1000,
               help="Most allocation entries (one provider in one candidate) one answer of "
                    "GET /allocation_candidates may hold; a request that matches more gets "
                    "400 and is told to pass limit or narrow the query. Each entry costs "
                    "about 0.4 KiB of the worker's memory while the answer is made."),
    cfg.IntOpt("candidates_time_limit", default=20, min=1,
               help="Seconds one candidates search may run; then it gets 400 and is told "
                    "to narrow the query."),
    cfg.IntOpt("candidates_large_entries", default=100_000, min=100,
               help="A candidates search that may return more allocation entries than "
                    "this (its bound after matching, limit applied) is large: it needs one "
                    "of the worker's candidates_large_slots."),
    cfg.IntOpt("candidates_large_slots", default=1, min=1,
               help="Large candidates searches each worker process runs at once; one more "
                    "is refused at once with 503 and Retry-After, so that large searches "
                    "never hold every thread and cheap requests are always served. Keep it "
                    "below --threads."),
    cfg.FloatOpt("candidates_grace", default=1.0, min=0.0,
                 help="Seconds a candidates search may run without a large-search slot; a "
                      "slower one must take a slot to go on (or is refused, as a large "
                      "search is)."),
    cfg.IntOpt("change_log_retention", default=3600, min=60,
               help="Seconds rows of the change log are kept. A worker that has not read "
                    "it for half this time reloads its read model in full."),
    cfg.IntOpt("history_retention", default=30, min=1, max=36500,
               help="Days the history of allocation and inventory changes is kept "
                    "(GET /history/...; the database records every writer's changes). "
                    "Older entries are deleted in the background by each worker, about "
                    "once an hour; doc/source/operating/index.md estimates the size."),
    cfg.IntOpt("read_model_check_interval", default=600, min=0,
               help="Seconds between comparisons of a worker's read model with a full "
                    "load from the tables (any difference is logged as drift and the "
                    "model reloaded). The load runs in a background thread of the worker; "
                    "0 starts one after every request that finds none running (for tests)."),
    # Monitoring.
    cfg.BoolOpt("metrics", default=False,
                help="Serve Prometheus metrics at /metrics: on the API address for a "
                     "token that the policy rule allotment:metrics allows (default: "
                     "admin), or, with metrics_listen, without a token on that "
                     "listener only."),
    cfg.StrOpt("metrics_listen",
               help="host:port (or a port alone: on 127.0.0.1) of a separate listener "
                    "that serves only /metrics, without a token, for Prometheus; keep it "
                    "on loopback or an internal network. When set, /metrics is not "
                    "served on the API address."),
    cfg.MultiStrOpt("headroom_requests", default=[],
                    help="Named request shapes (flavors) whose headroom /metrics exports "
                         "(allotment_headroom{request}, and allotment_headroom_aggregate"
                         "{request,aggregate} for each aggregate the shape's member_of "
                         "names): one per line, '<name> = <query string of GET "
                         "/allocation_candidates>', e.g. 'headroom_requests = m1.large = "
                         "resources=VCPU:4,MEMORY_MB:8192,DISK_GB:80&member_of=<uuid>'. "
                         "The name is 1 to 64 letters, digits, '.', '_', ':' or '-'. The "
                         "query is read as GET /headroom reads it at the latest "
                         "microversion; an entry that is not of this form, a name given "
                         "twice or a query that GET /allocation_candidates refuses with 400 "
                         "stops the service at start. Counted by each worker on its read "
                         "model at most once a minute. See doc/source/operating/headroom.md."),
    cfg.BoolOpt("dashboard", default=False,
                help="Serve a read-only capacity dashboard at /dashboard. The page "
                     "itself holds no data; every data request it makes carries the "
                     "user's token and is checked by the allotment:dashboard:* "
                     "policy rules, whose defaults are the upstream rules for the same "
                     "data (doc/source/operating/access.md)."),
    # The audit (GET /audit/allocations, ``allotment audit``, allotment_audit_findings).
    cfg.IntOpt("audit_migration_age", default=86400, min=0,
               help="Seconds a migration's consumer (consumer type MIGRATION, or one "
                    "holding allocations on two or more root providers) may stay unchanged "
                    "before the audit reports it as old_migration: a move that neither "
                    "finished nor was reverted. The age counts from the consumer's last "
                    "change (updated_at, else created_at)."),
]


def allotment_default(name: str) -> Any:
    """The default of ``[allotment] name``: the one place each limit's default is written.

    The server's and the application's limit records default to it, so that a
    server built without a configuration behaves as one with an empty file.
    """
    for opt in ALLOTMENT_OPTS:
        if opt.name == name:
            return opt.default
    raise KeyError(name)


def register_opts(conf: cfg.ConfigOpts) -> None:
    from oslo_log import log

    conf.register_opts(DEFAULT_OPTS)
    # debug, log_file, log_dir, use_stderr, log_config_append, ... as upstream.
    log.register_options(conf)
    conf.register_opts(ALLOTMENT_OPTS, group="allotment")
    conf.register_opts(API_OPTS, group="api")
    conf.register_opts(PLACEMENT_OPTS, group="placement")
    conf.register_opts(DATABASE_OPTS, group="placement_database")
    conf.register_opts(WORKAROUNDS_OPTS, group="workarounds")


def list_opts() -> list[tuple[str, Sequence[cfg.Opt]]]:
    """Our options by group, for oslo-config-generator and the docs (``placement.conf``).

    Upstream Placement's groups first, in the order of its sample file, then
    ``[allotment]``. The libraries' options (oslo.log's in ``[DEFAULT]``,
    ``[keystone_authtoken]``, ``[oslo_policy]``, ``[cors]``, ``[healthcheck]``) come
    from their own namespaces (``etc/allotment/config-generator.conf``).
    """
    return [
        ("DEFAULT", DEFAULT_OPTS),
        ("api", API_OPTS),
        ("placement", PLACEMENT_OPTS),
        ("placement_database", DATABASE_OPTS),
        ("workarounds", WORKAROUNDS_OPTS),
        ("allotment", ALLOTMENT_OPTS),
    ]


def set_library_defaults() -> None:
    """The libraries' options allotment gives another default, for the sample and the
    docs (oslo-config-generator's ``oslo.config.opts.defaults`` hook, which changes
    the options' defaults in its own process). The service sets the same defaults
    on its own ConfigOpts (``allotment.health.register_opts``)."""
    from oslo_middleware.healthcheck import opts

    from allotment import health

    cfg.set_defaults(opts.HEALTHCHECK_OPTS, backends=health.DEFAULT_BACKENDS)


def default_config_files() -> list[str]:
    """Where upstream looks for placement.conf when none is named."""
    candidates = []
    config_dir = os.environ.get("OS_PLACEMENT_CONFIG_DIR")
    if config_dir:
        candidates.append(os.path.join(config_dir, "placement.conf"))
    candidates.append("/etc/placement/placement.conf")
    return [path for path in candidates if os.path.exists(path)][:1]


def default_config_dirs() -> list[str]:
    """The ``placement.conf.d`` directory upstream's service reads when no file is named.

    oslo.config's own search (``~/.placement/``, ``~/``, ``/etc/placement/``,
    ``/etc/``; the first found): openstack-helm, for one, mounts the
    ``[keystone_authtoken]`` credentials as a snippet in
    ``/etc/placement/placement.conf.d/``.
    """
    return list(dict.fromkeys(cfg.find_config_dirs(project="placement", prog="placement")))


def load(
    config_files: list[str] | None = None,
    config_dirs: list[str] | None = None,
    overrides: dict[str, dict[str, object]] | None = None,
) -> cfg.ConfigOpts:
    """Build a fresh ConfigOpts (never the global one) from files and env.

    Without ``config_files``: upstream's places (``default_config_files``), and
    unless ``config_dirs`` names some, the ``placement.conf.d`` it finds
    (``default_config_dirs``).
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    args: list[str] = []
    if config_files is None:
        config_files = default_config_files()
        config_dirs = config_dirs or default_config_dirs()
    for path in config_files:
        args += ["--config-file", path]
    for path in config_dirs or []:
        args += ["--config-dir", path]
    conf(args, project="placement", default_config_files=[], default_config_dirs=[],
         validate_default_values=True)
    for group, values in (overrides or {}).items():
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    return conf
