"""Keystone's WSGI application for gunicorn (tests/keystone/identity.py starts it).

``keystone.wsgi.api`` hands ``sys.argv`` to oslo.config when imported; under
gunicorn that holds gunicorn's options, which oslo.config refuses. Keystone
reads its configuration from ``OS_KEYSTONE_CONFIG_FILES`` instead.
"""

import sys

del sys.argv[1:]

from keystone.wsgi.api import application  # noqa: E402,F401
