"""``placement.wsgi.api:application``: allotment's WSGI application under upstream's name.

It reads placement.conf as upstream's does (``OS_PLACEMENT_CONFIG_DIR``, else
``/etc/placement``; ``OS_<GROUP>__<OPTION>`` variables) on the first request.
"""

from __future__ import annotations

from allotment.wsgi import application

__all__ = ["application"]
