"""A real Keystone 30.0.0 on loopback: its venv, its start, and its identity API.

The venv is built once under ``tests/keystone/.cache/`` (gitignored) from
``tests/data/keystone-constraints.txt`` (Keystone, gunicorn and their
dependencies, resolved under OpenStack's upper-constraints and frozen) and
reused while that file is unchanged. Each start is a fresh Keystone: SQLite,
fernet token and credential keys, ``keystone-manage bootstrap`` (the ``admin``
user and project, the roles ``admin``, ``manager``, ``member``, ``reader`` and
``service``), served by gunicorn. ``keystone.wsgi.api`` parses ``sys.argv``
with oslo.config when imported, and under gunicorn that holds gunicorn's own
options; ``keystone_wsgi.py`` beside this file trims it first.

Renew the pins with ``.venv/bin/python -m tests.keystone.identity renew``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.clients.live import free_port

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache"
VENV = CACHE / "keystone-venv"
KEYSTONE_VERSION = "30.0.0"
CONSTRAINTS = ROOT / "tests" / "data" / "keystone-constraints.txt"
UPPER_CONSTRAINTS = ROOT / "tests" / "data" / "upper-constraints.txt"
PACKAGES = [f"keystone=={KEYSTONE_VERSION}", "gunicorn"]
ADMIN_PASSWORD = "keystone-admin-secret"
INSTALL_TIMEOUT = 900
READY_TIMEOUT = 120.0

# An expired token cannot be asked of Keystone; this one is made with its own
# fernet formatter and keys, so only its expiry is wrong.
_EXPIRED_TOKEN_SCRIPT = """
import base64, os, sys
from keystone import conf
conf.configure()
conf.CONF(args=[], project="keystone", default_config_files=[sys.argv[1]])
from keystone.token import token_formatters as tf
audit = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
print(tf.TokenFormatter().create_token(
    sys.argv[2], "2020-01-01T00:00:00.000000Z", [audit], tf.ProjectScopedPayload,
    methods=["password"], project_id=sys.argv[3]))
"""


def _say(message: str) -> None:
    print(f"[keystone] {message}", file=sys.stderr, flush=True)


def _stamp() -> str:
    return hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()


def ensure_venv() -> Path:
    """The Keystone venv, installed from the pins if missing or made from other pins."""
    marker = VENV / ".installed"
    if marker.exists() and marker.read_text() == _stamp():
        return VENV
    _say(f"installing Keystone {KEYSTONE_VERSION} into {VENV} (a minute or two)")
    shutil.rmtree(VENV, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    subprocess.run([*pip, "-c", str(CONSTRAINTS), *PACKAGES], check=True,
                   timeout=INSTALL_TIMEOUT)
    marker.write_text(_stamp())
    return VENV


def renew_constraints() -> None:
    """Resolve Keystone and gunicorn anew under upper-constraints; freeze into CONSTRAINTS."""
    workdir = CACHE / "renew"
    shutil.rmtree(workdir, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(workdir)], check=True)
    python = str(workdir / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "-c", str(UPPER_CONSTRAINTS), *PACKAGES], check=True)
    frozen = subprocess.run([python, "-m", "pip", "freeze", "--disable-pip-version-check"],
                            check=True, capture_output=True, text=True).stdout
    CONSTRAINTS.write_text(
        f"# Keystone {KEYSTONE_VERSION} for tests/keystone/ (its own venv, tests/keystone/.cache/):"
        " the exact set,\n# resolved under tests/data/upper-constraints.txt (OpenStack's) and"
        " frozen. Renew with\n# `.venv/bin/python -m tests.keystone.identity renew`.\n" + frozen)
    shutil.rmtree(workdir, ignore_errors=True)


class KeystoneError(RuntimeError):
    """Keystone answered a call of the identity API with an unexpected status."""


class Keystone:
    """One running Keystone (gunicorn, one worker) and an admin client of its API."""

    def __init__(self, workdir: Path, host: str = "127.0.0.1") -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.conf = workdir / "keystone.conf"
        self.log_path = workdir / "keystone.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._admin_token: str | None = None

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        venv = ensure_venv()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for keys in ("fernet-keys", "credential-keys"):
            (self.workdir / keys).mkdir(exist_ok=True)
        self.conf.write_text(
            "[DEFAULT]\n"
            f"log_file = {self.workdir / 'keystone-app.log'}\n"
            "[database]\n"
            f"connection = sqlite:///{self.workdir / 'keystone.sqlite'}\n"
            # bcrypt at its fewest rounds: a login costs milliseconds, not a second.
            "[identity]\npassword_hash_rounds = 4\n"
            "[token]\nprovider = fernet\n"
            "[fernet_tokens]\n"
            f"key_repository = {self.workdir / 'fernet-keys'}\n"
            "[credential]\n"
            f"key_repository = {self.workdir / 'credential-keys'}\n")
        manage = [str(venv / "bin" / "keystone-manage"), "--config-file", str(self.conf)]
        user = ["--keystone-user", str(os.getuid()), "--keystone-group", str(os.getgid())]
        with open(self.log_path, "ab") as log:
            for step in (["db_sync"], ["fernet_setup", *user], ["credential_setup", *user],
                         ["bootstrap", "--bootstrap-password", ADMIN_PASSWORD,
                          "--bootstrap-region-id", "RegionOne",
                          *[arg for interface in ("admin", "internal", "public")
                            for arg in (f"--bootstrap-{interface}-url", self.url + "/v3")]]):
                subprocess.run([*manage, *step], check=True, stdout=log,
                               stderr=subprocess.STDOUT, timeout=300)
            env = dict(os.environ, OS_KEYSTONE_CONFIG_FILES=str(self.conf))
            # A process group of its own, so stop() ends gunicorn's workers too.
            self.process = subprocess.Popen(
                [str(venv / "bin" / "gunicorn"), "--chdir", str(HERE),
                 "--bind", self.url.split("//")[1], "--workers", "1", "--threads", "8",
                 # gunicorn's control socket is one path per user: several would collide.
                 "--no-control-socket", "keystone_wsgi:application"],
                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"Keystone exited with {self.process.returncode}; "
                                   f"see {self.log_path}")
            with contextlib.suppress(OSError):
                if self.call("GET", "/v3", token=None, expect=(200,)) is not None:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Keystone not ready after {READY_TIMEOUT:g} s; "
                                   f"see {self.log_path}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    # --- the identity API ------------------------------------------------------------

    def call(self, method: str, path: str, body: Any = None, token: str | None = "",
             expect: tuple[int, ...] = (200, 201, 204),
             headers: dict[str, str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
        """One call; ``token=""`` means the admin's. Returns (JSON body, headers)."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token == "":
            token = self.admin_token()
        if token is not None:
            sent["X-Auth-Token"] = token
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, raw, got = response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as exc:
            status, raw, got = exc.code, exc.read(), dict(exc.headers)
        if status not in expect:
            raise KeystoneError(f"{method} {path}: {status} {raw[:500]!r}")
        return (json.loads(raw) if raw else {}), {k.lower(): v for k, v in got.items()}

    def admin_token(self) -> str:
        if self._admin_token is None:
            self._admin_token = self.password_token("admin", ADMIN_PASSWORD,
                                                    {"project": {"name": "admin",
                                                                 "domain": {"id": "default"}}})
        return self._admin_token

    def password_token(self, user: str, password: str, scope: dict[str, Any],
                       domain: str = "default") -> str:
        """A token for ``user`` (by name in ``domain``) scoped as ``scope`` says."""
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"id": domain}, "password": password}}},
            "scope": scope}}
        _, headers = self.call("POST", "/v3/auth/tokens", body, token=None, expect=(201,))
        return headers["x-subject-token"]

    def app_credential_token(self, credential_id: str, secret: str) -> str:
        body = {"auth": {"identity": {"methods": ["application_credential"],
                                      "application_credential": {"id": credential_id,
                                                                 "secret": secret}}}}
        _, headers = self.call("POST", "/v3/auth/tokens", body, token=None, expect=(201,))
        return headers["x-subject-token"]

    def revoke(self, token: str) -> None:
        self.call("DELETE", "/v3/auth/tokens", headers={"X-Subject-Token": token})

    def expired_token(self, user_id: str, project_id: str) -> str:
        """A project-scoped fernet token of ``user_id``, signed by this Keystone, expired."""
        out = subprocess.run([str(VENV / "bin" / "python"), "-c", _EXPIRED_TOKEN_SCRIPT,
                              str(self.conf), user_id, project_id],
                             check=True, capture_output=True, text=True, timeout=120)
        return out.stdout.strip().splitlines()[-1]

    def role_id(self, name: str) -> str:
        roles, _ = self.call("GET", f"/v3/roles?name={name}")
        return str(roles["roles"][0]["id"])

    def create(self, collection: str, key: str, fields: dict[str, Any]) -> str:
        """POST /v3/<collection> {key: fields}; the new entity's id."""
        created, _ = self.call("POST", f"/v3/{collection}", {key: fields})
        return str(created[key]["id"])

    def lookup(self, collection: str, name: str) -> str:
        found, _ = self.call("GET", f"/v3/{collection}?name={name}")
        return str(found[collection][0]["id"])


if __name__ == "__main__":
    if sys.argv[1:] != ["renew"]:
        sys.exit(f"usage: {sys.executable} -m tests.keystone.identity renew")
    renew_constraints()
    print(f"wrote {CONSTRAINTS}")
