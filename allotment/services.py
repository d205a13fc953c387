"""What every handler is built with: configuration, database and policy."""

from __future__ import annotations

from dataclasses import dataclass

from oslo_config import cfg

from allotment.db.engine import Database
from allotment.policy import Policy


@dataclass
class Services:
    conf: cfg.ConfigOpts
    db: Database
    policy: Policy
