"""A pytest plugin that lets openstacksdk's placement functional tests run without Keystone.

openstacksdk's ``openstack/tests/functional/base.py`` builds its connections from
clouds.yaml (``$OS_CLIENT_CONFIG_FILE``); ours names one cloud with
``auth_type: admin_token`` (token ``admin``, the endpoint of a live allotment under
noauth2) and ``has_compute``/``has_image`` false, so ``_pick_flavor``/``_pick_image``
find no compute or image service and return None, as they do on a cloud without them.
That needs no code. One thing does:

``Connection.current_user_id`` reads the user from the Keystone token
(``auth.get_access(session).user_id``) and raises ``ConfigException`` for any
other auth plugin; ``current_project_id`` asks the plugin, and admin_token's says
None. The allocation and usage tests send these ids as the consumer's
``project_id``/``user_id`` and filter usages by them. Under noauth2 the token
itself names the caller, ``user[:project]`` (the project defaults to the user),
which is what the server records for the request; loaded with
``-p tests.clients.openstacksdk_shim``, this module makes both properties answer
from the token for admin_token auth, and leaves every other plugin to upstream.
"""

from __future__ import annotations

from typing import Any

from keystoneauth1 import token_endpoint
from openstack.cloud import openstackcloud

_Cloud: Any = openstackcloud._OpenStackCloudMixin
_upstream_user_id: property = _Cloud.current_user_id
_upstream_project_id: property = _Cloud.current_project_id


def noauth_identity(token: str) -> tuple[str, str]:
    """The (user_id, project_id) that noauth2 takes from ``token``."""
    user_id, _sep, project_id = token.partition(":")
    return user_id, project_id or user_id


def _current_user_id(cloud: Any) -> str | None:
    auth = cloud.session.auth
    if isinstance(auth, token_endpoint.Token):
        return noauth_identity(auth.token)[0]
    value: str | None = _upstream_user_id.__get__(cloud)
    return value


def _current_project_id(cloud: Any) -> str | None:
    auth = cloud.session.auth
    if isinstance(auth, token_endpoint.Token):
        return noauth_identity(auth.token)[1]
    value: str | None = _upstream_project_id.__get__(cloud)
    return value


_Cloud.current_user_id = property(_current_user_id, doc=_upstream_user_id.__doc__)
_Cloud.current_project_id = property(_current_project_id, doc=_upstream_project_id.__doc__)
