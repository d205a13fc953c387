"""Tests that start servers or processes of their own.

Each module here starts something outside the pytest process: an ``allotment
serve`` subprocess (with gunicorn workers), private PostgreSQL/MariaDB servers
or a Galera cluster, a headless browser, writer processes. The fixtures of
tests/conftest.py (the backends and their databases) are visible here too.
"""
