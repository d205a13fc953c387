"""Alembic environment: runs on the connection that allotment hands it."""

from alembic import context

from allotment.db.tables import metadata

VERSION_TABLE = "allotment_alembic_version"

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata,
                  version_table=VERSION_TABLE, transactional_ddl=True)
with context.begin_transaction():
    context.run_migrations()
