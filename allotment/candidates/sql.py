"""Shared pieces of the candidate SQL: table aliases, parameters, filters.

Everything here builds SQLAlchemy Core expressions around bound parameters
named by the caller, so that statements can be built once per shape and
cached (see ``query``).
"""

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa

from allotment.db import tables as t

# Lists of ids longer than this are sent in several statements.
IN_CHUNK = 5000
CACHE = 512

# Aliases shared by every statement (building them is not free). The outer
# queries read RP and INV; EXISTS subqueries read the others (usage comes
# from ``ledger.capacity``).
RP = t.resource_providers.alias("rp")
INV = t.inventories.alias("inv")
RPT = t.resource_provider_traits.alias("has_trait")
RPA = t.resource_provider_aggregates.alias("in_agg")


def ids(name: str):
    """A list parameter, for ``IN``."""
    return sa.bindparam(name, expanding=True)


def integer(name: str):
    return sa.bindparam(name, type_=sa.Integer)


def exists(*conditions):
    # "SELECT 1", not "SELECT *": SQLite then answers from covering indexes.
    return sa.select(sa.literal_column("1")).where(*conditions).exists()


# --- filters, as SQL expressions on a provider id column ---------------------

def has_trait(provider_col, param):
    return exists(RPT.c.resource_provider_id == provider_col,
                  RPT.c.trait_id.in_(ids(param)))


def has_trait_id(provider_col, param):
    return exists(RPT.c.resource_provider_id == provider_col,
                  RPT.c.trait_id == integer(param))


def in_aggregate(provider_col, param):
    return exists(RPA.c.resource_provider_id == provider_col,
                  RPA.c.aggregate_id.in_(ids(param)))


def bits(*pairs: tuple[sa.ColumnElement[bool] | None, int]) -> sa.ColumnElement[int]:
    """Sum of ``bit`` for every (condition, bit) that holds, as an integer.

    Bits are rendered as integer literals (an ``IntFlag`` member would be
    bound with an inferred type, a float on some backends).
    """
    terms: list[sa.ColumnElement[int]] = [
        sa.case((condition, sa.literal_column(str(int(bit)))), else_=sa.literal_column("0"))
        for condition, bit in pairs if condition is not None]
    if not terms:
        return sa.literal_column("0")
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def chunks(values: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(values), IN_CHUNK):
        yield values[start:start + IN_CHUNK]
