"""PostgreSQL: the triggers' statements keep index plans, whatever the statistics.

Each connection plans every statement for its values
(``plan_cache_mode = force_custom_plan``, set by the engine): psycopg
prepares a statement from its fifth execution, and a generic plan made while
the tables were small was kept while they grew, until an ANALYZE that a
database without autovacuum never runs. The trigger functions are different:
PL/pgSQL prepares each of their statements once per session and runs it for
every claim, so planning it again each time cost about 40 % of the claims the
database could otherwise commit. Their statements are all lookups by key
(the claim's consumers, a provider's usage of a class, this transaction's
history entry), so each function keeps its cached plans
(``plan_cache_mode = auto``) and is planned with sequential scans priced out
(``enable_seqscan = off``): a plan made on a small table is then an index
plan, and stays right as the table grows. A scan of a transition table,
which has no index, is still what the planner chooses.

``CREATE OR REPLACE FUNCTION`` forgets these settings: a later migration that
replaces one of these functions sets them again.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

SETTINGS = ("plan_cache_mode = auto", "enable_seqscan = off")


def _trigger_functions() -> list[str]:
    """allotment's functions in the current schema, as signatures."""
    return list(op.get_bind().exec_driver_sql(
        "SELECT p.oid::regprocedure::text FROM pg_proc p "
        "WHERE p.pronamespace = current_schema()::regnamespace "
        "AND starts_with(p.proname, 'allotment_') ORDER BY 1").scalars())


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for function in _trigger_functions():
        for setting in SETTINGS:
            op.execute(f"ALTER FUNCTION {function} SET {setting}")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for function in _trigger_functions():
        op.execute(f"ALTER FUNCTION {function} RESET ALL")
