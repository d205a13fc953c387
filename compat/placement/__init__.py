"""Upstream Placement's module paths that deployment tools name, served by allotment.

Only ``placement.wsgi.api:application`` (and ``placement.wsgi.init_application``):
the uwsgi and gunicorn configurations of kolla-ansible, openstack-helm,
OpenStack-Ansible and devstack point at it. allotment replaces the
openstack-placement distribution; the two are not installed side by side (they
would also share ``placement-manage`` and ``placement-status``).
"""
