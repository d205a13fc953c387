"""What every handler is built with: configuration, database and policy."""

from __future__ import annotations

from dataclasses import dataclass, field

from oslo_config import cfg

from allotment.candidates.model import ReadModel
from allotment.db.engine import Database
from allotment.policy import Policy


@dataclass
class Services:
    conf: cfg.ConfigOpts
    db: Database
    policy: Policy
    # The candidates' read model, per worker process (None: read the tables).
    read_model: ReadModel | None = field(default=None)

    def __post_init__(self) -> None:
        allotment = self.conf.allotment
        if self.read_model is None and allotment.candidates_source == "model":
            self.read_model = ReadModel(self.db, retention=allotment.change_log_retention,
                                        check_interval=allotment.read_model_check_interval)
