"""``allotment_headroom{request}``: how many more of each configured request shape fit.

An operator names request shapes (flavors) in ``[allotment] headroom_requests``,
one per line, ``<name> = <query string of GET /allocation_candidates>``. They are
read once, at start, by the parser GET /headroom uses (``parse_request``, at the
latest microversion): an entry that is not of that form, a name given twice or a
query GET /allocation_candidates would refuse with 400 stops the service with
the reason (``ValueError``), rather than a gauge that silently never appears.

A scrape renders, per shape, what GET /headroom answers for its query
(``candidates.headroom.answer`` on the worker's read model, with the candidates
budget): the total, whether it is exact, and per aggregate when the shape has
``member_of``. Counted at most every ``HEADROOM_CACHE_SECONDS`` in each worker (a
count over 10,000 hosts takes tens of milliseconds; an alert on "fewer than 20
m1.large left" needs no fresher value). A shape that cannot be counted (a class
not created yet, the budget's refusal, the database gone) has
``allotment_headroom_scrape_success{request}`` 0 and no other sample, and the
scrapes go on counting until every shape succeeds.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError

from allotment import errors, refusals
from allotment.candidates import headroom
from allotment.candidates.budget import Budget
from allotment.candidates.model import ReadModel
from allotment.candidates.request import CandidateRequest
from allotment.db.availability import DatabaseUnavailable
from allotment.db.engine import Database
from allotment.http.candidates_query import parse_request
from allotment.http.microversion import MAX
from allotment.http.request import Query
from allotment.ledger.errors import LedgerError
from allotment.metrics.kept import KeptRead

LOG = logging.getLogger(__name__)

# Seconds a worker keeps the counts before it counts again.
HEADROOM_CACHE_SECONDS = 60.0

OPTION = "[allotment] headroom_requests"
_NAME = re.compile(r"[A-Za-z0-9._:-]{1,64}")


@dataclass(frozen=True)
class Shape:
    """One configured request shape: its name (the ``request`` label) and query."""

    name: str
    query: str
    request: CandidateRequest


def parse_shapes(lines: list[str]) -> list[Shape]:
    """The configured shapes, in order; ``ValueError`` naming the first bad entry."""
    shapes: dict[str, Shape] = {}
    for line in lines:
        name, sep, query_string = line.partition("=")
        name, query_string = name.strip(), query_string.strip()
        # A query string has a '=': without one after the name, the name is missing.
        if not sep or "=" not in query_string:
            raise ValueError(f"{OPTION}: expected '<name> = <query string>', not {line!r}")
        if not _NAME.fullmatch(name):
            raise ValueError(f"{OPTION}: the name {name!r} must be 1 to 64 letters, digits, "
                             "'.', '_', ':' or '-'")
        if name in shapes:
            raise ValueError(f"{OPTION}: {name!r} is named twice")
        try:
            request = parse_request(Query(query_string), MAX)
        except errors.PlacementError as exc:
            raise ValueError(f"{OPTION}: {name}: {exc.message}") from None
        shapes[name] = Shape(name, query_string, request)
    return list(shapes.values())


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class HeadroomGauges:
    """The headroom families for the configured shapes, counted at most every
    ``HEADROOM_CACHE_SECONDS`` (``KeptRead``); kept only when every shape was
    counted."""

    def __init__(self, db: Database, read_model: ReadModel | None,
                 budget: Callable[[], Budget], shapes: list[Shape]) -> None:
        self.db = db
        self.read_model = read_model
        self.budget = budget
        self.shapes = shapes
        self._kept: KeptRead[bytes] = KeptRead(self._count_all,
                                               lambda: HEADROOM_CACHE_SECONDS)

    def render(self) -> bytes:
        if not self.shapes:
            return b""
        return self._kept.get()[0]

    def _count_all(self) -> tuple[bytes, bool]:
        counted = {shape.name: self._count(shape) for shape in self.shapes}
        return _render(counted), all(found is not None for found in counted.values())

    def _count(self, shape: Shape) -> headroom.Headroom | None:
        """GET /headroom's answer for ``shape``; None (logged) if it cannot be had."""
        try:
            with self.budget() as budget:
                return headroom.answer(self.db, self.read_model, shape.request,
                                       budget=budget)
        except (LedgerError, SQLAlchemyError, DatabaseUnavailable) as exc:
            # A refusal in the words GET /headroom would answer it with.
            reason = refusals.message(exc) if isinstance(exc, LedgerError) else exc
            LOG.warning("metrics: cannot count the headroom of %s: %s", shape.name, reason)
            return None


def _render(counted: dict[str, headroom.Headroom | None]) -> bytes:
    every = f"counted at most every {HEADROOM_CACHE_SECONDS:g} s"
    totals = [f"# HELP allotment_headroom Consumers of the named request shape "
              f"([allotment] headroom_requests) that still fit, as GET /headroom's total; "
              f"{every}.\n# TYPE allotment_headroom gauge\n"]
    optimal = ["# HELP allotment_headroom_optimal 1 if allotment_headroom is the most "
               "that can fit (exact), 0 if a greedy packing's count (at least that many "
               "fit).\n# TYPE allotment_headroom_optimal gauge\n"]
    aggregates = ["# HELP allotment_headroom_aggregate Consumers of the named request "
                  "shape that fit in each aggregate its member_of names (GET /headroom's "
                  "aggregates).\n# TYPE allotment_headroom_aggregate gauge\n"]
    success = ["# HELP allotment_headroom_scrape_success 1 if the named request shape's "
               "headroom was counted, 0 if not (see the log).\n"
               "# TYPE allotment_headroom_scrape_success gauge\n"]
    for name, found in counted.items():
        label = f'request="{_escape(name)}"'
        success.append(f"allotment_headroom_scrape_success{{{label}}} "
                       f"{0 if found is None else 1}\n")
        if found is None:
            continue
        totals.append(f"allotment_headroom{{{label}}} {found.total}\n")
        optimal.append(f"allotment_headroom_optimal{{{label}}} {int(found.optimal)}\n")
        aggregates += [f'allotment_headroom_aggregate{{{label},aggregate="{_escape(agg)}"}} '
                       f"{n}\n" for agg, n in (found.aggregates or {}).items()]
    return "".join(totals + optimal + aggregates + success).encode()
