"""Consumers, and the projects, users and consumer types they point at.

A consumer row exists exactly while it holds allocations: it is created by
its first claim (generation 1) and deleted with its last allocation. Every
change compare-and-sets its generation, so concurrent writers of the same
consumer are detected (``retry.Race``) even below microversion 1.28, where
clients send no generation.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from allotment.db import tables as t
from allotment.ledger.common import utcnow
from allotment.ledger.errors import ConsumerGenerationConflict, Race

# Consumers without a type are shown (and filtered) under this name.
UNKNOWN_TYPE = "unknown"


@dataclass(frozen=True)
class Version:
    """A consumer row as a writer needs it: which row, at which generation."""

    id: int
    uuid: str
    generation: int


@dataclass(frozen=True)
class Consumer(Version):
    project: str
    user: str
    consumer_type: str | None


def lock_many(conn: sa.Connection, uuids: list[str]) -> dict[str, Version]:
    """Row-lock the existing consumers among ``uuids`` and read them, by uuid.

    In uuid order, so two writers never wait on each other in a cycle. Only
    the consumers' own row: locking the joined project/user rows would
    serialise every claim of a project. (SQLite has no row locks; its
    writers are already serialised.)
    """
    if not uuids:
        return {}
    rows = conn.execute(_LOCK_MANY, {"uuids": uuids})
    return {row.uuid: Version(row.id, row.uuid, row.generation) for row in rows}


# Built once: these run in every claim (see allocations.py).
_LOCK_MANY = (sa.select(t.consumers.c.id, t.consumers.c.uuid, t.consumers.c.generation)
              .where(t.consumers.c.uuid.in_(sa.bindparam("uuids", expanding=True)))
              .order_by(t.consumers.c.uuid).with_for_update())
_OWNERS = sa.union_all(*(
    sa.select(sa.literal(kind).label("kind"), table.c.id, column.label("name"))
    .where(column.in_(sa.bindparam(kind, expanding=True)))
    for kind, table, column in (("p", t.projects, t.projects.c.external_id),
                                ("u", t.users, t.users.c.external_id),
                                ("t", t.consumer_types, t.consumer_types.c.name))))


def get_many(conn: sa.Connection, uuids: list[str]) -> dict[str, Consumer]:
    """The existing consumers among ``uuids``, by uuid."""
    if not uuids:
        return {}
    c, p, u, ct = t.consumers, t.projects, t.users, t.consumer_types
    rows = conn.execute(
        sa.select(c.c.id, c.c.uuid, c.c.generation, p.c.external_id.label("project"),
                  u.c.external_id.label("user"), ct.c.name.label("consumer_type"))
        .select_from(c.join(p, c.c.project_id == p.c.id).join(u, c.c.user_id == u.c.id)
                     .outerjoin(ct, c.c.consumer_type_id == ct.c.id))
        .where(c.c.uuid.in_(uuids)))
    return {row.uuid: Consumer(id=row.id, uuid=row.uuid, generation=row.generation,
                               project=row.project, user=row.user,
                               consumer_type=row.consumer_type)
            for row in rows}


def check_generation(uuid: str, consumer: Version | None, given: int | None) -> None:
    """Refuse a write whose consumer generation is stale (1.28+).

    ``given`` None means "I expect this consumer not to exist yet".
    """
    actual = consumer.generation if consumer is not None else None
    if actual != given:
        raise ConsumerGenerationConflict(uuid, actual, given)


def _ensure_named(conn: sa.Connection, table: sa.Table, column: str, value: str) -> int:
    """The id of the row whose ``column`` is ``value``, inserting it when missing.

    A concurrent insert of the same value makes ours fail with a duplicate
    key; the caller's retry (a new transaction) then finds the row.
    """
    col = table.c[column]
    row = conn.execute(sa.select(table.c.id).where(col == value)).first()
    if row is not None:
        return row.id
    result = conn.execute(table.insert().values({column: value, "created_at": utcnow()}))
    new_id: int = result.inserted_primary_key[0]  # type: ignore[index]
    return new_id


@dataclass(frozen=True)
class Owners:
    """The ids of the projects, users and consumer types a write names."""

    projects: dict[str, int]
    users: dict[str, int]
    types: dict[str, int]


def ensure_owners(conn: sa.Connection, projects: set[str], users: set[str],
                  types: set[str]) -> Owners:
    """The ids of the named projects, users and types, inserting missing ones.

    One statement when they all exist, as they do for every claim after a
    project's first: this is on the claim's path.
    """
    found: dict[str, dict[str, int]] = {"p": {}, "u": {}, "t": {}}
    if projects or users or types:
        for row in conn.execute(_OWNERS, {"p": sorted(projects), "u": sorted(users),
                                          "t": sorted(types)}):
            found[row.kind][row.name] = row.id
    for name in sorted(projects - found["p"].keys()):
        found["p"][name] = ensure_project(conn, name)
    for name in sorted(users - found["u"].keys()):
        found["u"][name] = ensure_user(conn, name)
    for name in sorted(types - found["t"].keys()):
        found["t"][name] = ensure_type(conn, name)
    return Owners(found["p"], found["u"], found["t"])


def ensure_project(conn: sa.Connection, external_id: str) -> int:
    return _ensure_named(conn, t.projects, "external_id", external_id)


def ensure_user(conn: sa.Connection, external_id: str) -> int:
    return _ensure_named(conn, t.users, "external_id", external_id)


def ensure_type(conn: sa.Connection, name: str) -> int:
    return _ensure_named(conn, t.consumer_types, "name", name)


@dataclass(frozen=True)
class New:
    """A consumer to create: it now holds allocations (generation 1)."""

    uuid: str
    project_id: int
    user_id: int
    type_id: int | None


def create_many(conn: sa.Connection, new: list[New]) -> None:
    """Insert new consumers, all in one statement."""
    if not new:
        return
    now = utcnow()
    conn.execute(t.consumers.insert(), [
        {"uuid": n.uuid, "project_id": n.project_id, "user_id": n.user_id, "generation": 1,
         "consumer_type_id": n.type_id, "created_at": now} for n in new])


def update(conn: sa.Connection, consumer: Version, project_id: int, user_id: int,
           type_id: int | None, set_type: bool) -> None:
    """Bump the generation (compare-and-set) and record the owner given now."""
    values: dict[str, object] = {"generation": consumer.generation + 1, "project_id": project_id,
                    "user_id": user_id, "updated_at": utcnow()}
    if set_type:
        values["consumer_type_id"] = type_id
    result = conn.execute(
        t.consumers.update()
        .where(t.consumers.c.id == consumer.id,
               t.consumers.c.generation == consumer.generation)
        .values(**values))
    if result.rowcount != 1:
        raise Race(f"consumer {consumer.uuid} changed")


def delete(conn: sa.Connection, consumer: Version) -> None:
    """Remove a consumer that no longer holds anything (compare-and-set)."""
    result = conn.execute(
        t.consumers.delete()
        .where(t.consumers.c.id == consumer.id,
               t.consumers.c.generation == consumer.generation))
    if result.rowcount != 1:
        raise Race(f"consumer {consumer.uuid} changed")
