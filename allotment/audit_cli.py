"""``allotment audit``: the audit of GET /audit/allocations, from the command line.

It reads placement.conf as ``allotment status`` does, opens the database
once (no waiting: a monitoring job wants an answer now), checks that the
schema is allotment's current one (the history tables are needed), and runs
``ledger.audit`` in one snapshot. It changes nothing and creates nothing: a
SQLite database that does not exist (a typo, or no configuration at all) is an
error, not a new empty file.

Output: ``table`` (one line per finding: kind, subject, summary; then the
counts) or ``json`` (the body GET /audit/allocations answers).

Exit status, for cron and monitoring checks:

- 0: no findings of the kinds asked for;
- 1: findings (the output says which);
- 2: the audit could not run (configuration, database, schema, arguments).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from oslo_config import cfg
from sqlalchemy.exc import SQLAlchemyError

from allotment.db import migrate
from allotment.db.availability import DatabaseUnavailable
from allotment.db.engine import normalize_url
from allotment.db.errors import one_line
from allotment.db.setup import database_from_conf
from allotment.http.history_render import render_report
from allotment.ledger import audit
from allotment.schemas import audit as schema

CLEAN = 0
FINDINGS = 1
ERROR = 2


def parse_kinds(values: Sequence[str] | None) -> list[str]:
    """``--kind`` values (each may be comma-separated); every kind when none.
    ``ValueError`` names an unknown one."""
    if not values:
        return list(audit.KINDS)
    kinds = [name.strip() for value in values for name in value.split(",") if name.strip()]
    unknown = [name for name in kinds if name not in audit.KINDS]
    if unknown or not kinds:
        raise ValueError(f"unknown finding kind {', '.join(unknown) or repr('')}; "
                         f"the kinds are {', '.join(audit.KINDS)}")
    return list(dict.fromkeys(kinds))


def check_limit(limit: int | None) -> int:
    """``--limit``: GET /audit/allocations' bounds and default."""
    if limit is None:
        return schema.DEFAULT_LIMIT
    if not 1 <= limit <= schema.MAX_LIMIT:
        raise ValueError(f"--limit must be from 1 to {schema.MAX_LIMIT}, not {limit}")
    return limit


def run(conf: cfg.ConfigOpts, kinds: Sequence[str], limit: int, output: str = "table",
        out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Audit ``conf``'s database; print the report; the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    missing = _missing_sqlite_file(conf.placement_database.connection)
    if missing is not None:
        print(f"allotment audit: no database at {missing} (the audit creates none)", file=err)
        return ERROR
    try:
        db = database_from_conf(conf)
    except Exception as exc:  # a missing or malformed connection URL, a missing driver
        print(f"allotment audit: {one_line(exc)}", file=err)
        return ERROR
    try:
        current, head = migrate.current(db.engine), migrate.head()
        if current != head:
            print(f"allotment audit: the database schema is at revision {current}, the audit "
                  f'needs {head}: run "allotment db upgrade".', file=err)
            return ERROR
        with db.snapshot() as conn:
            report = audit.audit(conn, audit.Settings.from_conf(conf), kinds, limit)
    except (SQLAlchemyError, DatabaseUnavailable) as exc:
        print(f"allotment audit: cannot read the database: {one_line(exc)}", file=err)
        return ERROR
    finally:
        db.dispose()
    if output == "json":
        out.write(json.dumps(render_report(report), indent=2) + "\n")
    else:
        out.write(table(report, kinds))
    return FINDINGS if any(report.counts[kind] for kind in kinds) else CLEAN


def _missing_sqlite_file(url: str | None) -> str | None:
    """The path of a SQLite database ``url`` names that does not exist (None: it
    does, or ``url`` is no SQLite file)."""
    if not url:
        return None
    try:
        parsed = normalize_url(url)
    except Exception:  # malformed: database_from_conf says so
        return None
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") \
            or database.startswith("file:"):
        return None
    return None if os.path.exists(database) else os.path.abspath(database)


def _subject(finding: audit.Finding) -> str:
    if finding.consumer_uuid is not None:
        return f"consumer {finding.consumer_uuid}"
    return f"provider {finding.resource_provider_uuid} {finding.resource_class}"


def table(report: audit.Report, kinds: Sequence[str]) -> str:
    """One line per finding (kind, subject, summary), then the counts."""
    lines = []
    if report.findings:
        kind_width = max(len(f.kind) for f in report.findings)
        subject_width = max(len(_subject(f)) for f in report.findings)
        lines.append(f"{'KIND':<{kind_width}}  {'SUBJECT':<{subject_width}}  SUMMARY")
        lines += [f"{f.kind:<{kind_width}}  {_subject(f):<{subject_width}}  {f.summary}"
                  for f in report.findings]
    else:
        lines.append("No findings.")
    shown = {kind: sum(1 for f in report.findings if f.kind == kind) for kind in kinds}

    def counted(kind: str) -> str:
        if kind not in shown:
            return f"{kind} {report.counts[kind]} (not listed)"
        if shown[kind] < report.counts[kind]:
            return f"{kind} {report.counts[kind]} ({shown[kind]} listed)"
        return f"{kind} {report.counts[kind]}"

    counts = ", ".join(counted(kind) for kind in audit.KINDS)
    lines.append("")
    lines.append(f"Counts at {report.generated_at.isoformat(timespec='seconds')}Z: {counts}")
    return "\n".join(lines) + "\n"
