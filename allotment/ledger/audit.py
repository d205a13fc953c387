"""The audit: what looks wrong in the database now, each finding with its evidence.

Five kinds of finding (``KINDS``):

- ``over_capacity``: an inventory record holds more than its capacity
  (``capacity.exceeded``). Upstream lets an inventory shrink below its
  usage with only a warning in its log, and so does allotment.
- ``empty_consumer``: a consumers row without allocations. Upstream leaves
  them after empty or refused claims; allotment deletes a consumer with its
  last allocation, so only another writer leaves one.
- ``old_migration``: a consumer of type ``MIGRATION``, or one holding
  allocations on two or more root providers (sharing providers, which carry
  ``MISC_SHARES_VIA_AGGREGATE``, are not counted: an instance with shared
  storage holds on two roots by design), unchanged for longer than
  ``Settings.migration_age``: a move that neither finished nor was reverted.
  Its age counts from its last change, ``updated_at`` (set by every write
  after the first), else ``created_at``: a consumer still being written is
  still being worked on. A consumer with neither time is not reported.
- ``allocation_without_inventory``: allocations of a class on a provider that
  has no inventory record of it. The API refuses to delete an inventory in
  use, so the record went behind its back.
- ``incomplete_consumer``: a consumer owned by the placeholder project or user
  that consumers written before microversion 1.8 get (``[placement]
  incomplete_consumer_project_id`` / ``incomplete_consumer_user_id``).

Each kind is one statement (``_MATCHING``): counted in full (``count``) and
read a page at a time, at most ``limit_per_kind`` findings in a stable order,
so a database with 100,000 empty consumers gives a bounded answer. A few
kinds read details of that page in one more statement each. Every finding
carries the latest history entries (``ledger.history``) of its consumer, or
of its provider and class, which tell how it came about.

The audit only reads. Its caller runs it in one snapshot
(``Database.snapshot``) so that the counts and the findings agree. Times are
naive UTC; the cutoff of ``old_migration`` is computed here and compared as a
value, so the statements are the same on every backend.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import os_traits
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger import capacity, history
from allotment.ledger.common import utcnow
from allotment.ledger.history import AllocationChange, InventoryChange

if TYPE_CHECKING:
    from oslo_config import cfg

OVER_CAPACITY = "over_capacity"
EMPTY_CONSUMER = "empty_consumer"
OLD_MIGRATION = "old_migration"
ALLOCATION_WITHOUT_INVENTORY = "allocation_without_inventory"
INCOMPLETE_CONSUMER = "incomplete_consumer"
# In the order the report lists them.
KINDS = (OVER_CAPACITY, EMPTY_CONSUMER, OLD_MIGRATION, ALLOCATION_WITHOUT_INVENTORY,
         INCOMPLETE_CONSUMER)

MIGRATION_TYPE = "MIGRATION"
SHARING_TRAIT = os_traits.MISC_SHARES_VIA_AGGREGATE
# Consumers named in an allocation_without_inventory finding (all are counted).
LISTED_CONSUMERS = 20
# History entries of each kind shown per finding, by default.
HISTORY_PER_FINDING = 5

_A = t.allocations
_C = t.consumers
_P = t.projects
_U = t.users
_CT = t.consumer_types
_RP = t.resource_providers
_RC = t.resource_classes
_INV = t.inventories.alias("inv")


@dataclass(frozen=True)
class Settings:
    """What the audit judges by: the age of an old migration (seconds) and the
    placeholder owners of incomplete consumers."""

    migration_age: int
    incomplete_consumer_project_id: str
    incomplete_consumer_user_id: str

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        return cls(conf.allotment.audit_migration_age,
                   conf.placement.incomplete_consumer_project_id,
                   conf.placement.incomplete_consumer_user_id)


@dataclass(frozen=True)
class Finding:
    """One thing that looks wrong: its subject (a consumer, or a provider and
    class), a line that says what, the numbers that show it (``evidence``:
    plain values, naive UTC datetimes), and the history that explains it."""

    kind: str
    summary: str
    consumer_uuid: str | None
    resource_provider_uuid: str | None
    resource_class: str | None
    evidence: dict[str, Any]
    allocation_history: list[AllocationChange] = field(default_factory=list)
    inventory_history: list[InventoryChange] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    """``counts``: every finding of each kind; ``findings``: at most the limit of
    each kind asked for, in ``KINDS`` order."""

    generated_at: datetime.datetime
    settings: Settings
    counts: dict[str, int]
    findings: list[Finding]


def _no_check() -> None:
    pass


def audit(conn: sa.Connection, settings: Settings, kinds: Iterable[str] = KINDS,
          limit_per_kind: int = 100, history_per_finding: int = HISTORY_PER_FINDING,
          now: datetime.datetime | None = None,
          check: Callable[[], None] = _no_check) -> Report:
    """The findings of ``kinds`` (``KINDS`` names), the counts of all kinds.

    ``now`` (naive UTC) is the time the report is of: the migrations' ages
    count to it. ``check`` is called before every statement and may raise to
    stop the audit (the caller's budget: time, a client gone).
    """
    now = now or utcnow()
    wanted = set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise ValueError(f"unknown finding kinds: {sorted(unknown)}")
    findings: list[Finding] = []
    # Every statement below goes through ``execute`` (all the helpers use).
    checked = typing.cast(sa.Connection, _Checked(conn, check))
    for kind in KINDS:
        if kind in wanted:
            page = _MATCHING[kind](settings, now).limit(limit_per_kind)
            findings += _FINDINGS[kind](checked, checked.execute(page).all(), settings, now)
    return Report(now, settings, count(checked, settings, now),
                  _with_history(checked, findings, history_per_finding))


class _Checked:
    """A connection whose every statement is preceded by ``check``."""

    def __init__(self, conn: sa.Connection, check: Callable[[], None]) -> None:
        self.conn = conn
        self.check = check

    @property
    def dialect(self) -> sa.Dialect:
        return self.conn.dialect

    def execute(self, statement: Any) -> sa.CursorResult[Any]:
        self.check()
        return self.conn.execute(statement)


def count(conn: sa.Connection, settings: Settings,
          now: datetime.datetime | None = None) -> dict[str, int]:
    """How many findings of each kind there are (one COUNT per kind)."""
    now = now or utcnow()
    return {kind: int(conn.execute(
        sa.select(sa.func.count()).select_from(
            _MATCHING[kind](settings, now).order_by(None).subquery())).scalar_one())
        for kind in KINDS}


# --- what each kind matches (one statement, in a stable order) ----------------

def _over_capacity(settings: Settings, now: datetime.datetime) -> sa.Select:
    return (sa.select(_RP.c.uuid, _RP.c.name, _RC.c.name.label("resource_class"),
                      _INV.c.total, _INV.c.reserved, _INV.c.allocation_ratio,
                      capacity.usage(_INV).label("used"))
            .select_from(_INV.join(_RP, _RP.c.id == _INV.c.resource_provider_id)
                         .outerjoin(_RC, _RC.c.id == _INV.c.resource_class_id))
            .where(capacity.exceeded(_INV))
            .order_by(_RP.c.uuid, _INV.c.resource_class_id))


def _consumers() -> sa.Select:
    """Consumers with their owners' names and type (outer joins: a row another
    writer left may point at nothing)."""
    return (sa.select(_C.c.uuid, _P.c.external_id.label("project_id"),
                      _U.c.external_id.label("user_id"), _CT.c.name.label("consumer_type"),
                      _C.c.generation, _C.c.created_at, _C.c.updated_at)
            .select_from(_C.outerjoin(_P, _P.c.id == _C.c.project_id)
                         .outerjoin(_U, _U.c.id == _C.c.user_id)
                         .outerjoin(_CT, _CT.c.id == _C.c.consumer_type_id))
            .order_by(_C.c.id))


def _empty_consumer(settings: Settings, now: datetime.datetime) -> sa.Select:
    return _consumers().where(~sa.exists().where(_A.c.consumer_id == _C.c.uuid))


def _sharing(provider: Any) -> sa.Exists:
    """The provider shares its inventory with its aggregates (a correlated EXISTS)."""
    rpt, trait = t.resource_provider_traits, t.traits
    return sa.exists().where(rpt.c.resource_provider_id == provider.c.id,
                             rpt.c.trait_id == trait.c.id, trait.c.name == SHARING_TRAIT)


def _old_migration(settings: Settings, now: datetime.datetime) -> sa.Select:
    on_several_roots = (
        sa.select(_A.c.consumer_id)
        .select_from(_A.join(_RP, _RP.c.id == _A.c.resource_provider_id))
        .where(~_sharing(_RP))
        .group_by(_A.c.consumer_id)
        .having(sa.func.count(sa.distinct(_RP.c.root_provider_id)) > 1))
    cutoff = now - datetime.timedelta(seconds=settings.migration_age)
    return _consumers().where(
        sa.or_(_CT.c.name == MIGRATION_TYPE, _C.c.uuid.in_(on_several_roots)),
        sa.func.coalesce(_C.c.updated_at, _C.c.created_at) < cutoff)


def _allocation_without_inventory(settings: Settings, now: datetime.datetime) -> sa.Select:
    no_record = ~sa.exists().where(
        t.inventories.c.resource_provider_id == _A.c.resource_provider_id,
        t.inventories.c.resource_class_id == _A.c.resource_class_id)
    return (sa.select(_A.c.resource_provider_id, _A.c.resource_class_id, _RP.c.uuid,
                      _RP.c.name, _RC.c.name.label("resource_class"),
                      sa.func.sum(_A.c.used).label("used"),
                      sa.func.count(sa.distinct(_A.c.consumer_id)).label("consumers"))
            .select_from(_A.outerjoin(_RP, _RP.c.id == _A.c.resource_provider_id)
                         .outerjoin(_RC, _RC.c.id == _A.c.resource_class_id))
            .where(no_record)
            .group_by(_A.c.resource_provider_id, _A.c.resource_class_id, _RP.c.uuid,
                      _RP.c.name, _RC.c.name)
            .order_by(_A.c.resource_provider_id, _A.c.resource_class_id))


def _incomplete_consumer(settings: Settings, now: datetime.datetime) -> sa.Select:
    return _consumers().where(sa.or_(
        _P.c.external_id == settings.incomplete_consumer_project_id,
        _U.c.external_id == settings.incomplete_consumer_user_id))


_MATCHING: dict[str, Callable[[Settings, datetime.datetime], sa.Select]] = {
    OVER_CAPACITY: _over_capacity,
    EMPTY_CONSUMER: _empty_consumer,
    OLD_MIGRATION: _old_migration,
    ALLOCATION_WITHOUT_INVENTORY: _allocation_without_inventory,
    INCOMPLETE_CONSUMER: _incomplete_consumer,
}


# --- the rows as findings -----------------------------------------------------

Rows = Sequence[sa.Row[Any]]


def _over_capacity_findings(conn: sa.Connection, rows: Rows, settings: Settings,
                            now: datetime.datetime) -> list[Finding]:
    findings = []
    for row in rows:
        ratio = float(row.allocation_ratio)
        most = capacity.capacity(row.total, row.reserved, ratio)
        used = int(row.used)
        shown = capacity.shown_ratio(ratio)
        findings.append(Finding(
            OVER_CAPACITY,
            f"{row.resource_class} of provider {row.name} ({row.uuid}) is over capacity: "
            f"{used} used, capacity {most} = (total {row.total} - reserved {row.reserved}) "
            f"x allocation_ratio {shown}",
            None, row.uuid, row.resource_class,
            {"resource_provider_name": row.name, "used": used, "total": row.total,
             "reserved": row.reserved, "allocation_ratio": shown, "capacity": most}))
    return findings


def _consumer_evidence(row: sa.Row[Any]) -> dict[str, Any]:
    return {"consumer_uuid": row.uuid, "project_id": row.project_id, "user_id": row.user_id,
            "consumer_type": row.consumer_type, "generation": row.generation,
            "created_at": row.created_at, "updated_at": row.updated_at}


def _empty_consumer_findings(conn: sa.Connection, rows: Rows, settings: Settings,
                             now: datetime.datetime) -> list[Finding]:
    return [Finding(EMPTY_CONSUMER,
                    f"consumer {row.uuid} (project {row.project_id}, user {row.user_id}) "
                    "holds no allocations but still has its consumer record",
                    row.uuid, None, None, _consumer_evidence(row))
            for row in rows]


def _roots(conn: sa.Connection, consumer_uuids: list[str]
           ) -> dict[str, tuple[list[str], list[str]]]:
    """Per consumer: the roots of the providers it holds allocations on (sharing
    providers left out), and the sharing providers; uuids, sorted."""
    if not consumer_uuids:
        return {}
    root = _RP.alias("root")
    rows = conn.execute(
        sa.select(_A.c.consumer_id, _RP.c.uuid, root.c.uuid.label("root_uuid"),
                  _sharing(_RP).label("sharing"))
        .select_from(_A.join(_RP, _RP.c.id == _A.c.resource_provider_id)
                     .outerjoin(root, root.c.id == _RP.c.root_provider_id))
        .where(_A.c.consumer_id.in_(consumer_uuids)).distinct())
    found: dict[str, tuple[set[str], set[str]]] = {u: (set(), set()) for u in consumer_uuids}
    for row in rows:
        roots, sharing = found[row.consumer_id]
        if row.sharing:
            sharing.add(row.uuid)
        else:
            # A provider of an old schema without a root is its own root.
            roots.add(row.root_uuid or row.uuid)
    return {uuid: (sorted(roots), sorted(sharing)) for uuid, (roots, sharing) in found.items()}


def duration(seconds: int) -> str:
    """A number of seconds as an operator reads it: ``2 d 3 h``, ``5 h 12 min``."""
    days, rest = divmod(max(seconds, 0), 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min"
    return f"{seconds} s"


def _old_migration_findings(conn: sa.Connection, rows: Rows, settings: Settings,
                            now: datetime.datetime) -> list[Finding]:
    held = _roots(conn, [row.uuid for row in rows])
    findings = []
    for row in rows:
        roots, sharing = held[row.uuid]
        reasons = []
        if row.consumer_type == MIGRATION_TYPE:
            reasons.append(f"consumer type {MIGRATION_TYPE}")
        if len(roots) > 1:
            reasons.append(f"allocations on {len(roots)} roots")
        # As the statement reads it: the last change, updated_at else created_at.
        changed = row.updated_at or row.created_at
        age = int((now - changed).total_seconds())
        findings.append(Finding(
            OLD_MIGRATION,
            f"consumer {row.uuid} looks like a migration left behind ({', '.join(reasons)}): "
            f"unchanged for {duration(age)}, longer than {duration(settings.migration_age)}",
            row.uuid, None, None,
            {**_consumer_evidence(row), "reasons": reasons, "roots": roots,
             "sharing_providers": sharing, "age_seconds": age}))
    return findings


def _allocation_without_inventory_findings(conn: sa.Connection, rows: Rows,
                                           settings: Settings,
                                           now: datetime.datetime) -> list[Finding]:
    findings = []
    for row in rows:
        consumers = conn.execute(
            sa.select(_A.c.consumer_id, sa.func.sum(_A.c.used).label("used"))
            .where(_A.c.resource_provider_id == row.resource_provider_id,
                   _A.c.resource_class_id == row.resource_class_id)
            .group_by(_A.c.consumer_id).order_by(_A.c.consumer_id)
            .limit(LISTED_CONSUMERS)).all()
        resource_class = row.resource_class
        provider = (f"provider {row.name} ({row.uuid})" if row.uuid is not None
                    else f"a provider that no longer exists (id {row.resource_provider_id})")
        what = resource_class or f"resource class id {row.resource_class_id} (no such class)"
        used, holders = int(row.used), int(row.consumers)
        findings.append(Finding(
            ALLOCATION_WITHOUT_INVENTORY,
            f"{holders} consumer(s) hold {used} {what} on {provider}, which has no "
            "inventory of it",
            None, row.uuid, resource_class,
            {"resource_provider_uuid": row.uuid, "resource_provider_name": row.name,
             "resource_class": resource_class, "used": used, "consumer_count": holders,
             "consumers": [{"consumer_uuid": c.consumer_id, "used": int(c.used)}
                           for c in consumers]}))
    return findings


def _incomplete_consumer_findings(conn: sa.Connection, rows: Rows, settings: Settings,
                                  now: datetime.datetime) -> list[Finding]:
    findings = []
    for row in rows:
        placeholder = [name for name, value, given in (
            ("project", row.project_id, settings.incomplete_consumer_project_id),
            ("user", row.user_id, settings.incomplete_consumer_user_id)) if value == given]
        findings.append(Finding(
            INCOMPLETE_CONSUMER,
            f"consumer {row.uuid} has the placeholder {' and '.join(placeholder)} id of "
            "consumers written before microversion 1.8",
            row.uuid, None, None, {**_consumer_evidence(row), "placeholder": placeholder}))
    return findings


_FINDINGS: dict[str, Callable[[sa.Connection, Rows, Settings, datetime.datetime],
                              list[Finding]]] = {
    OVER_CAPACITY: _over_capacity_findings,
    EMPTY_CONSUMER: _empty_consumer_findings,
    OLD_MIGRATION: _old_migration_findings,
    ALLOCATION_WITHOUT_INVENTORY: _allocation_without_inventory_findings,
    INCOMPLETE_CONSUMER: _incomplete_consumer_findings,
}


def _with_history(conn: sa.Connection, findings: list[Finding],
                  per_finding: int) -> list[Finding]:
    """Each finding with the latest history of its provider and class (of every
    class when the class is gone), or of its consumer."""
    if per_finding <= 0:
        return findings
    by_consumer = history.latest_for_consumers(
        conn, [f.consumer_uuid for f in findings if f.consumer_uuid is not None], per_finding)
    out = []
    for finding in findings:
        if finding.resource_provider_uuid is not None:
            allocations, inventories = history.latest_for_provider(
                conn, finding.resource_provider_uuid, per_finding, finding.resource_class)
            finding = dataclasses.replace(finding, allocation_history=allocations,
                                          inventory_history=inventories)
        elif finding.consumer_uuid is not None:
            finding = dataclasses.replace(
                finding, allocation_history=by_consumer[finding.consumer_uuid])
        out.append(finding)
    return out
