"""Stands in for ``placement.conf``: upstream's option names, registered by allotment."""

from allotment.config import register_opts

__all__ = ["register_opts"]
