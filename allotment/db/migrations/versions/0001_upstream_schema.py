"""Upstream Placement's schema, created only where it does not exist yet.

An operator's existing Placement database already has every table: then this
step changes nothing. On an empty database it creates the tables exactly as
upstream's migrations leave them and stamps upstream's own version table with
its head, so upstream Placement accepts the database too.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from allotment.db import tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    existing = set(sa.inspect(bind).get_table_names())
    missing = [t for t in tables.metadata.sorted_tables if t.name not in existing]
    if not missing:
        return
    tables.metadata.create_all(bind, tables=missing)
    if "alembic_version" not in existing:
        version = sa.Table("alembic_version", sa.MetaData(),
                           sa.Column("version_num", sa.String(32), nullable=False),
                           sa.PrimaryKeyConstraint("version_num",
                                                   name="alembic_version_pkc"))
        version.create(bind)
        bind.execute(version.insert().values(version_num=tables.UPSTREAM_ALEMBIC_HEAD))
