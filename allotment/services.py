"""What every handler is built with: configuration, database, policy, and the
counters the domain reports to (the domain is handed them; it never imports metrics)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from oslo_config import cfg

from allotment.candidates.budget import Budget, Limits, Slots
from allotment.candidates.model import ReadModel
from allotment.db.engine import Database
from allotment.ledger.history import Retention
from allotment.metrics import DomainCounters
from allotment.policy import Policy


@dataclass
class Services:
    conf: cfg.ConfigOpts
    db: Database
    policy: Policy
    # The candidates' read model, per worker process (None: read the tables).
    read_model: ReadModel | None = field(default=None)
    # Lost write races, candidate searches, read-model loads: counted while
    # metrics are on in this process (no-ops otherwise).
    counters: DomainCounters = field(default_factory=DomainCounters)
    # What one candidates search may cost, and this process's large-search slots.
    candidate_limits: Limits = field(init=False)
    candidate_slots: Slots = field(init=False)
    # Trims the history now and then (``due`` after each write).
    history_retention: Retention = field(init=False)

    def __post_init__(self) -> None:
        allotment = self.conf.allotment
        self.candidate_limits = Limits.from_conf(self.conf)
        self.candidate_slots = Slots(self.candidate_limits.large_slots)
        self.history_retention = Retention(self.db, allotment.history_retention)
        if self.read_model is None and allotment.candidates_source == "model":
            self.read_model = ReadModel(self.db, retention=allotment.change_log_retention,
                                        check_interval=allotment.read_model_check_interval,
                                        observer=self.counters)

    def candidate_budget(self, client_gone: Callable[[], bool] | None = None) -> Budget:
        """A new budget for one candidates search (``client_gone``: the server's
        test for a closed connection, when it has one)."""
        return Budget(self.candidate_limits, self.candidate_slots, client_gone)
