"""``placement.wsgi``: upstream's package of WSGI entry points, as allotment's."""

from __future__ import annotations

from allotment.wsgi import WSGIApp


def init_application() -> WSGIApp:
    """A new application from placement.conf (``OS_PLACEMENT_CONFIG_DIR``, else
    ``/etc/placement``), read now: upstream's function of that name."""
    from allotment import config, logs, wsgi

    conf = config.load()
    logs.setup(conf)
    return wsgi.make_app(conf)
