"""allotment where deployment tools put upstream Placement, their files unchanged.

- ``placement-manage`` and ``placement-status``, the installed commands, on a
  fresh SQLite database and on PostgreSQL and MariaDB databases made for the
  test (and dropped after it);
- Apache httpd with mod_wsgi and kolla-ansible's virtual host (stable/2025.1
  and 2025.2: ``WSGIScriptAlias / .../bin/placement-api``), and the same script
  mounted at ``/placement``;
- uwsgi with the inis that openstack-helm, OpenStack-Ansible and kolla-ansible
  (2026.1 on) write, all naming ``placement.wsgi.api:application``, and with
  upstream's install guide's ``--wsgi-file .../placement-api``;
- devstack's arrangement: Apache's mod_proxy_uwsgi passing ``/placement`` to
  uwsgi on a unix socket;
- ``placement-api`` run as a program (pbr's test server).

Each server is private: loopback ports, a temporary directory with its
configuration, SQLite database and logs, removed afterwards. The tools' text is
kept but for what cannot be on a test machine (addresses, paths, users, TLS);
each place says what it changed. Servers run as the current user; as root,
Apache (which will not serve as root) and its mod_wsgi daemons run as
``www-data``. mod_wsgi embeds the system's Python: allotment comes from this
venv through ``python-path``.

Without Apache or mod_wsgi (Debian's ``apache2`` and
``libapache2-mod-wsgi-py3``) or uwsgi (the test extra), the tests that need
them skip on a developer's machine and fail in CI (``CI=true``).
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from allotment import config, manage
from allotment.db import migrate
from allotment.db import tables as t
from allotment.db.engine import create_engine
from tests import conftest
from tests.support.dbservers import free_port
from tests.support.needs import require

BIN = Path(sys.executable).parent
VENV = BIN.parent
SITE_PACKAGES = sysconfig.get_paths()["purelib"]
APACHE2 = Path("/usr/sbin/apache2")
APACHE_MODULES = Path("/usr/lib/apache2/modules")
MODULE_PATH = "placement.wsgi.api:application"
HEAD = migrate.head()
# What an unauthenticated client gets at the root of any mount point.
ROOT_LINKS = [{"rel": "self", "href": ""}]
# The tools' files as the deployment pages show them (literalinclude).
SNIPPETS = Path(__file__).parents[2] / "doc" / "source" / "deploy" / "snippets"


def _snippet(name: str, *changes: tuple[str, str]) -> str:
    """The page's snippet ``name`` with each (old, new) change made; each old text
    must be there, so that the page and the test cannot drift apart."""
    text = (SNIPPETS / name).read_text()
    for old, new in changes:
        assert old in text, f"{name} no longer holds {old!r}"
        text = text.replace(old, new)
    return text


def _require(missing: str | None) -> None:
    require(missing, "needed for the deployment tools' tests")


def _apache_missing() -> str | None:
    needed = [APACHE2, APACHE_MODULES / "mod_wsgi.so", APACHE_MODULES / "mod_proxy_uwsgi.so"]
    absent = [str(path) for path in needed if not path.exists()]
    if absent:
        return (f"not installed: {', '.join(absent)} "
                "(apt-get install apache2 libapache2-mod-wsgi-py3)")
    # Debian's mod_wsgi embeds /usr/bin/python3: this venv's packages need the same
    # minor version.
    system = subprocess.run(["/usr/bin/python3", "-c",
                             "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True).stdout.strip()
    ours = "%d.%d" % sys.version_info[:2]
    if system != ours:
        return f"mod_wsgi runs Python {system}, this venv is {ours}"
    return None


def _uwsgi_missing() -> str | None:
    if not (BIN / "uwsgi").exists():
        return f"{BIN / 'uwsgi'} is not installed (pip install -e '.[test]')"
    return None


def _env(**extra: str) -> dict[str, str]:
    """This environment without OS_* (a developer's placement settings), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(extra)
    return env


def _write_conf(directory: Path, url: str) -> Path:
    path = directory / "placement.conf"
    path.write_text(f"[placement_database]\nconnection = {url}\n"
                    "[api]\nauth_strategy = noauth2\n")
    return path


def _run(*argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(arg) for arg in argv], capture_output=True, text=True,
                          env=_env(), timeout=timeout)


def _manage(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(BIN / "placement-manage", "--config-file", conf, *args)


def _status(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _run(BIN / "placement-status", "--config-file", conf, "upgrade", "check", *args)


# --- placement-manage and placement-status ------------------------------------------


def test_manage_sync_version_and_online_migrations_on_sqlite(tmp_path: Path) -> None:
    conf = _write_conf(tmp_path, f"sqlite:///{tmp_path}/placement.sqlite")
    assert _manage(conf, "db", "version").stdout == "None\n"
    for _ in range(2):  # the second sync finds nothing to do
        synced = _manage(conf, "db", "sync")
        assert (synced.returncode, synced.stdout) == (0, ""), synced.stderr
        version = _manage(conf, "db", "version")
        assert (version.returncode, version.stdout) == (0, f"{HEAD}\n")
    engine = create_engine(f"sqlite:///{tmp_path}/placement.sqlite")
    with engine.connect() as conn:
        classes = conn.execute(sa.select(sa.func.count()).select_from(t.resource_classes))
        assert classes.scalar_one() > 0  # the standard names come with the schema
    engine.dispose()

    done = _manage(conf, "db", "online_data_migrations")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Running batches of 50 until complete\n")
    assert "|    set_root_provider_ids    |      0      |     0     |" in done.stdout
    assert "| create_incomplete_consumers |      0      |     0     |" in done.stdout
    batch = _manage(conf, "db", "online_data_migrations", "--max-count", "5")
    assert batch.returncode == 0 and "Running batches" not in batch.stdout
    for bad in ("0", "-3", "many"):
        refused = _manage(conf, "db", "online_data_migrations", "--max-count", bad)
        assert (refused.returncode, refused.stdout) == (
            127, "Must supply a positive value for max_count\n")

    assert _manage(conf, "db", "stamp", "0001").returncode == 0
    assert _manage(conf, "db", "version").stdout == "0001\n"
    unknown = _manage(conf, "db", "stamp", "a082b8bb98d0")  # upstream's names are not ours
    assert unknown.returncode == 1 and "a082b8bb98d0" in unknown.stderr
    assert _manage(conf, "db", "stamp", "head").returncode == 0
    assert _manage(conf, "db", "version").stdout == f"{HEAD}\n"

    bare = _manage(conf)
    assert bare.returncode == 1 and "{db}" in bare.stdout  # the help
    assert _manage(conf, "db").returncode == 0  # the db help
    assert _manage(conf, "db", "nonesuch").returncode == 2  # argparse
    assert _run(BIN / "placement-manage", "--version").returncode == 0


@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_manage_sync_on_server_databases(backend: str, tmp_path: Path) -> None:
    url = conftest._create_server_database(backend)
    try:
        conf = _write_conf(tmp_path, url)
        assert _manage(conf, "db", "version").stdout == "None\n"
        for _ in range(2):
            synced = _manage(conf, "db", "sync")
            assert synced.returncode == 0, synced.stderr
            assert _manage(conf, "db", "version").stdout == f"{HEAD}\n"
        assert _status(conf).returncode == 0
        assert _manage(conf, "db", "online_data_migrations").returncode == 0
    finally:
        conftest._drop_server_database(backend, url)


def test_status_exit_codes(tmp_path: Path) -> None:
    synced = _write_conf(tmp_path, f"sqlite:///{tmp_path}/synced.sqlite")
    assert _manage(synced, "db", "sync").returncode == 0
    ok = _status(synced)
    assert ok.returncode == 0, ok.stdout
    assert "Check: Database schema" in ok.stdout and "Result: Failure" not in ok.stdout
    as_json = json.loads(_status(synced, "--json").stdout)
    assert [check["result"] for check in as_json["checks"]] == [0, 0, 0, 0]

    (tmp_path / "empty").mkdir()
    unsynced = _write_conf(tmp_path / "empty", f"sqlite:///{tmp_path}/empty.sqlite")
    failed = _status(unsynced)
    assert failed.returncode == 2, failed.stdout
    assert "placement-manage db sync" in failed.stdout

    (tmp_path / "none").mkdir()
    nowhere = tmp_path / "none" / "placement.conf"
    nowhere.write_text("[DEFAULT]\n")
    broken = _status(nowhere)  # no connection: the checks cannot run
    assert broken.returncode == 255 and broken.stdout == ""
    assert broken.stderr.startswith("placement-status: the checks could not run: ")
    assert len(broken.stderr.strip().splitlines()) == 1
    assert _run(BIN / "placement-status").returncode == 2  # no command: argparse


_LIGHT_SCRIPT = """
import json, sys
from allotment import manage, upgradecheck
conf = ["--config-file", sys.argv[1]]
codes = [manage.main([*conf, "db", "sync"]),
         manage.main([*conf, "db", "online_data_migrations"]),
         upgradecheck.main([*conf, "upgrade", "check"])]
print(json.dumps({"codes": codes, "modules": sorted(sys.modules)}))
"""


def test_commands_do_not_load_the_web_stack(tmp_path: Path) -> None:
    """Jobs that only migrate (helm's db-sync, kolla's bootstrap) import the database layer."""
    from tests.live.test_cli_processes import WEB_STACK

    conf = _write_conf(tmp_path, f"sqlite:///{tmp_path}/light.sqlite")
    out = subprocess.run([sys.executable, "-c", _LIGHT_SCRIPT, str(conf)], env=_env(),
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(out.splitlines()[-1])
    assert result["codes"] == [0, 0, 0]
    assert [name for name in result["modules"]
            if any(name == top or name.startswith(top + ".") for top in WEB_STACK)] == []


def _legacy_rows(url: str) -> None:
    """What an old release left: two providers without root ids, one consumer
    holding allocations without a consumers row."""
    engine = create_engine(url)
    with engine.begin() as conn:
        ids = [conn.execute(t.resource_providers.insert().values(
            uuid=str(uuid.uuid4()), name=uuid.uuid4().hex, generation=0)).inserted_primary_key[0]
            for _ in range(2)]
        consumer = str(uuid.uuid4())
        for resource_class_id in (0, 1):
            conn.execute(t.allocations.insert().values(
                resource_provider_id=ids[0], consumer_id=consumer,
                resource_class_id=resource_class_id, used=1))
    engine.dispose()


def test_online_migrations_finish_what_status_reports(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/legacy.sqlite"
    conf = _write_conf(tmp_path, url)
    assert _manage(conf, "db", "sync").returncode == 0
    _legacy_rows(url)
    assert _status(conf).returncode == 2  # missing root ids: failure

    batch = _manage(conf, "db", "online_data_migrations", "--max-count", "1")
    assert batch.returncode == 1, batch.stdout  # it did work, more may remain
    assert "1 rows matched query set_root_provider_ids, 1 migrated" in batch.stdout
    assert "create_incomplete_consumers" not in batch.stdout  # the batch was full
    assert _status(conf).returncode == 2

    rest = _manage(conf, "db", "online_data_migrations")
    assert rest.returncode == 0, rest.stdout
    assert "|    set_root_provider_ids    |      1      |     1     |" in rest.stdout
    assert "| create_incomplete_consumers |      1      |     1     |" in rest.stdout
    assert _status(conf).returncode == 0


def test_online_migrations_on_each_backend(database: conftest.BackendDatabase,
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The migrations' SQL on SQLite, PostgreSQL and MariaDB (in-process)."""
    _legacy_rows(database.url)
    conf = _write_conf(tmp_path, database.url)
    assert manage.main(["--config-file", str(conf), "db", "online_data_migrations"]) == 0
    assert "| create_incomplete_consumers |      1      |     1     |" in capsys.readouterr().out
    rp, c, p = t.resource_providers, t.consumers, t.projects
    with database.engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(rp)
                            .where(rp.c.root_provider_id != rp.c.id)).scalar_one() == 0
        owner = conn.execute(sa.select(p.c.external_id, c.c.generation)
                             .select_from(c.join(p, c.c.project_id == p.c.id))).one()
    assert tuple(owner) == ("00000000-0000-0000-0000-000000000000", 0)


def test_wsgi_application_reads_placement_conf_d(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """openstack-helm puts [keystone_authtoken] in placement.conf.d; upstream reads it."""
    snippets = tmp_path / ".placement" / "placement.conf.d"
    snippets.mkdir(parents=True)
    (snippets / "keystone.conf").write_text("[placement]\nmax_allocation_candidates = 9\n")
    _write_conf(tmp_path, "sqlite://")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("OS_PLACEMENT_CONFIG_DIR", str(tmp_path))
    assert config.load().placement.max_allocation_candidates == 9
    # Named files alone: nothing else is read.
    assert config.load([str(tmp_path / "placement.conf")]).placement \
        .max_allocation_candidates == -1


# --- live servers ---------------------------------------------------------------------


def _call(url: str, method: str = "GET", body: Any = None, token: str | None = "admin",
          version: str = "1.39") -> tuple[int, dict[str, str], Any]:
    sent = {"OpenStack-API-Version": f"placement {version}", "Accept": "application/json"}
    if token is not None:
        sent["X-Auth-Token"] = token
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        sent["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=sent)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            raw, status, got = resp.read(), resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, dict(exc.headers)
    headers = {k.lower(): v for k, v in got.items()}
    is_json = headers.get("content-type", "").startswith("application/json")
    return status, headers, json.loads(raw) if raw and is_json else raw


def _exercise(base: str, prefix: str = "", mod_wsgi: bool = False) -> None:
    """The version document and a handful of real calls at ``base`` (mounted at
    ``prefix``): create a provider, its inventory, candidates, a claim, usages.

    ``mod_wsgi``: a 200 answer with a relative Location header is turned by
    mod_wsgi's daemon mode into an internal GET of that location (the CGI rule):
    the client gets the provider as GET shows it, without Location. Upstream
    answers POST /resource_providers (1.20+) the same way, so it is served the
    same under kolla's Apache.
    """
    status, _, root = _call(base + "/", token=None)
    assert status == 200, root
    assert root["versions"][0]["links"] == ROOT_LINKS
    assert root["versions"][0]["max_version"] == "1.39"
    assert _call(base + "/resource_providers", token=None)[0] == 401

    status, headers, _ = _call(base + "/resource_providers", "POST",
                               {"name": f"old-{uuid.uuid4().hex[:8]}"}, version="1.19")
    assert status == 201 and headers["location"].startswith(f"{prefix}/resource_providers/")
    status, headers, provider = _call(base + "/resource_providers", "POST",
                                      {"name": f"compute-{uuid.uuid4().hex[:8]}"})
    assert status == 200, provider
    rp = provider["uuid"]
    if not mod_wsgi:
        assert headers["location"] == f"{prefix}/resource_providers/{rp}"
    assert {"rel": "self", "href": f"{prefix}/resource_providers/{rp}"} in provider["links"]

    status, _, body = _call(f"{base}/resource_providers/{rp}/inventories", "PUT", {
        "resource_provider_generation": 0,
        "inventories": {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}}})
    assert status == 200, body

    status, _, found = _call(base + "/allocation_candidates?resources=VCPU:2,MEMORY_MB:512")
    assert status == 200, found
    assert [list(r["allocations"]) for r in found["allocation_requests"]] == [[rp]]
    assert found["provider_summaries"][rp]["resources"]["VCPU"] == {"capacity": 8, "used": 0}

    consumer = str(uuid.uuid4())
    claim = {"allocations": {rp: {"resources": {"VCPU": 2, "MEMORY_MB": 512}}},
             "project_id": str(uuid.uuid4()), "user_id": str(uuid.uuid4()),
             "consumer_generation": None, "consumer_type": "INSTANCE"}
    status, _, body = _call(f"{base}/allocations/{consumer}", "PUT", claim)
    assert status == 204, body
    status, _, usages = _call(f"{base}/resource_providers/{rp}/usages")
    assert status == 200 and usages["usages"] == {"VCPU": 2, "MEMORY_MB": 512}


class _Process:
    """A server process in a session of its own; ``stop`` ends it and its children.

    uwsgi is stopped with SIGINT, its "kill them all": on SIGTERM the inis' hook
    (``gracefully_kill_them_all``) waits for every worker, and one still loading
    the application (lazy-apps) is left out and waited for until
    worker-reload-mercy.
    """

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str],
                 cwd: Path) -> None:
        self.name, self.log = name, log
        self.stop_signal = signal.SIGINT if name == "uwsgi" else signal.SIGTERM
        with open(log, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            env=env, cwd=cwd, start_new_session=True)

    def wait_until_answering(self, url: str, logs: list[Path], timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10) as resp:
                if resp.status == 200:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                shown = "\n".join(f"--- {path}\n{path.read_text(errors='replace')[-3000:]}"
                                  for path in [self.log, *logs] if path.exists())
                pytest.fail(f"{self.name} did not answer {url}:\n{shown}", pytrace=False)
            time.sleep(0.3)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        # Workers that outlived their master (or a master that would not stop).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


class _Deployment:
    """A private directory (readable by Apache's user) with placement.conf and a
    synced SQLite database, and the server processes started in it."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: as root, Apache's user must reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="allotment-deploy-"))
        self.dir.chmod(0o755)
        (self.dir / "data").mkdir()
        (self.dir / "logs").mkdir()
        self.conf = _write_conf(self.dir, f"sqlite:///{self.dir}/data/placement.sqlite")
        synced = _manage(self.conf, "db", "sync")
        assert synced.returncode == 0, synced.stderr
        self.processes: list[_Process] = []

    # As root, Apache serves (and mod_wsgi runs the application) as this user.
    @property
    def apache_user(self) -> tuple[str, str] | None:
        if os.geteuid() != 0:
            return None
        for name in ("www-data", "nobody"):
            with contextlib.suppress(KeyError):
                entry = pwd.getpwnam(name)
                return name, grp.getgrgid(entry.pw_gid).gr_name
        pytest.fail("no unprivileged user for Apache (www-data, nobody)")

    def hand_data_to_apache(self) -> None:
        """The database directory to the user that mod_wsgi's daemons run as."""
        user = self.apache_user
        if user is None:
            return
        entry = pwd.getpwnam(user[0])
        for path in [self.dir / "data", *(self.dir / "data").iterdir()]:
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self, name: str, argv: list[str], url: str,
              logs: tuple[Path, ...] = ()) -> None:
        env = _env(OS_PLACEMENT_CONFIG_DIR=str(self.dir))
        if name == "apache2":
            # Under pytest --cov, coverage would start in the mod_wsgi daemons (the
            # venv's .pth files), whose user cannot write its data files.
            env = {k: v for k, v in env.items() if not k.startswith("COVERAGE_")}
        process = _Process(name, argv, self.dir / "logs" / f"{name}.out", env, self.dir)
        self.processes.append(process)
        process.wait_until_answering(url, list(logs))

    def apache_conf(self, body: str) -> Path:
        """A whole httpd.conf: what Debian's apache2.conf and the image provide
        (server root, logs, modules, user), then ``body``, the tool's part."""
        user = self.apache_user
        users = f"User {user[0]}\nGroup {user[1]}\n" if user else ""
        modules = "\n".join(
            f"LoadModule {name}_module {APACHE_MODULES}/mod_{name}.so"
            for name in ("mpm_event", "authz_core", "wsgi", "proxy", "proxy_uwsgi"))
        path = self.dir / "httpd.conf"
        path.write_text(
            f'ServerRoot "{self.dir}"\nServerName 127.0.0.1\n'
            f'DefaultRuntimeDir "{self.dir}/logs"\nPidFile "{self.dir}/logs/httpd.pid"\n'
            f'ErrorLog "{self.dir}/logs/error.log"\nLogLevel info\n{users}{modules}\n'
            f'WSGISocketPrefix "{self.dir}/logs/wsgi"\n\n{body}')
        return path

    def start_apache(self, body: str, url: str) -> None:
        self.hand_data_to_apache()
        conf = self.apache_conf(body)
        checked = _run(APACHE2, "-f", conf, "-t")
        assert checked.returncode == 0, checked.stderr
        logs = self.dir / "logs"
        self.start("apache2", [str(APACHE2), "-f", str(conf), "-DFOREGROUND"], url,
                   (logs / "error.log", logs / "placement-api-error.log"))

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def deployment() -> Iterator[_Deployment]:
    deployment = _Deployment()
    try:
        yield deployment
    finally:
        deployment.close()


def _wsgi_user(deployment: _Deployment) -> str:
    """kolla's ``user=placement group=placement``, as this machine has it."""
    user = deployment.apache_user
    return f" user={user[0]} group={user[1]}" if user else ""


def test_kolla_ansible_apache_mod_wsgi(deployment: _Deployment) -> None:
    """kolla-ansible's placement-api-wsgi.conf.j2 (stable/2025.1, 2025.2), rendered
    with placement_api_workers=2 and TLS off. Changed: the address and log
    directory, the daemon's user, ``python-path`` (mod_wsgi's Python finds this
    venv), and wsgi_directory is this venv's bin/ instead of /var/lib/kolla/venv/bin."""
    _require(_apache_missing())
    port, log_dir = free_port(), deployment.dir / "logs"
    body = _snippet(
        "kolla-placement-api-wsgi.conf",
        ("192.0.2.10:8780", f"127.0.0.1:{port}"), ("*:8780", f"*:{port}"),
        (" user=placement group=placement", _wsgi_user(deployment)),
        ("display-name=placement-api", f"display-name=placement-api python-path={SITE_PACKAGES}"),
        ("/var/lib/kolla/venv/bin", str(BIN)), ("/var/log/kolla/placement", str(log_dir)))
    base = f"http://127.0.0.1:{port}"
    deployment.start_apache(body, base + "/")
    _exercise(base, mod_wsgi=True)
    access = (log_dir / "placement-api-access.log").read_text()
    assert '"PUT /resource_providers/' in access  # kolla's CustomLog


def test_mod_wsgi_under_the_placement_prefix(deployment: _Deployment) -> None:
    """The same script at ``/placement`` (``WSGIScriptAlias /placement``): links
    and Location carry the prefix, the version document's link is relative."""
    _require(_apache_missing())
    port = free_port()
    body = f"""
Listen 127.0.0.1:{port}
<VirtualHost *:{port}>
    WSGIDaemonProcess placement-api processes=1 threads=2{_wsgi_user(deployment)} \
        python-path={SITE_PACKAGES}
    WSGIProcessGroup placement-api
    WSGIScriptAlias /placement {BIN}/placement-api
    WSGIApplicationGroup %{{GLOBAL}}
    WSGIPassAuthorization On
    <Directory {BIN}>
        Require all granted
    </Directory>
</VirtualHost>
"""
    base = f"http://127.0.0.1:{port}/placement"
    deployment.start_apache(body, base + "/")
    _exercise(base, prefix="/placement", mod_wsgi=True)
    assert _call(f"http://127.0.0.1:{port}/", token=None)[0] == 404  # nothing else mounted


def _uwsgi_ini(deployment: _Deployment, name: str, text: str) -> Path:
    path = deployment.dir / f"{name}.ini"
    path.write_text(text)
    return path


def test_openstack_helm_uwsgi(deployment: _Deployment) -> None:
    """openstack-helm's placement chart: values.yaml conf.placement_api_uwsgi, as
    configmap-etc renders it (keys in order, http-socket from the endpoint), run as
    the deployment runs it (``uwsgi --ini``). Changed: http-socket and the stats
    server on loopback ports. (``route-user-agent`` needs a PCRE build of uwsgi;
    without one, uwsgi ignores it.)"""
    _require(_uwsgi_missing())
    port, stats = free_port(), free_port()
    ini = _uwsgi_ini(deployment, "placement-api-uwsgi", _snippet(
        "openstack-helm-uwsgi.ini", ("0.0.0.0:8778", f"127.0.0.1:{port}"),
        ("0.0.0.0:1717", f"127.0.0.1:{stats}")))
    base = f"http://127.0.0.1:{port}"
    deployment.start("uwsgi", [str(BIN / "uwsgi"), "--ini", str(ini)], base + "/")
    _exercise(base)
    with urllib.request.urlopen(f"http://127.0.0.1:{stats}/", timeout=10) as resp:
        assert len(json.loads(resp.read())["workers"]) == 1


def test_openstack_ansible_uwsgi(deployment: _Deployment) -> None:
    """OpenStack-Ansible's os_placement through ansible-role-uwsgi's uwsgi.ini.j2
    (source install: ``virtualenv`` is the service's venv; placement_wsgi_processes
    2, threads 1). Changed: no uid/gid (the placement user), the pid file's
    directory, http-socket on a loopback port, and ``env`` carries
    OS_PLACEMENT_CONFIG_DIR."""
    _require(_uwsgi_missing())
    port = free_port()
    ini = _uwsgi_ini(deployment, "placement-api", _snippet(
        "openstack-ansible-uwsgi.ini", ("uid = placement\ngid = placement\n", ""),
        ("/openstack/venvs/placement", str(VENV)), ("192.0.2.10:8780", f"127.0.0.1:{port}"),
        ("need-app = true\n", f"need-app = true\nenv = OS_PLACEMENT_CONFIG_DIR={deployment.dir}\n"),
        ("/run/placement-api", f"{deployment.dir}/logs")))
    base = f"http://127.0.0.1:{port}"
    deployment.start("uwsgi", [str(BIN / "uwsgi"), "--ini", str(ini)], base + "/")
    _exercise(base)


def test_kolla_ansible_uwsgi(deployment: _Deployment) -> None:
    """kolla-ansible 2026.1 on: service-uwsgi-config's uwsgi.ini.j2 for placement-api
    (module from placement_services, TLS off, 2 workers), started as the
    container does (``uwsgi <ini>``). Changed: the address, logto2's directory,
    no uid. The distribution's plugin lines stay: pip's uwsgi has Python built
    in and only warns that python3_plugin.so is not there."""
    _require(_uwsgi_missing())
    port = free_port()
    ini = _uwsgi_ini(deployment, "placement-api-uwsgi", _snippet(
        "kolla-placement-api-uwsgi.ini", ("192.0.2.10:8780", f"127.0.0.1:{port}"),
        ("/var/log/kolla/placement", f"{deployment.dir}/logs"), ("uid = placement\n", "")))
    base = f"http://127.0.0.1:{port}"
    deployment.start("uwsgi", [str(BIN / "uwsgi"), str(ini)], base + "/",
                     (deployment.dir / "logs" / "placement-api-uwsgi.log",))
    _exercise(base)


def test_install_guide_uwsgi_wsgi_file(deployment: _Deployment) -> None:
    """Upstream's install guide from PyPI (doc/source/install/from-pypi.rst), which
    still names the script: ``uwsgi -M --http :8778 --wsgi-file
    /usr/local/bin/placement-api --processes 2 --threads 10``. Changed: the
    address, and the script's directory (this venv's)."""
    _require(_uwsgi_missing())
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    argv = _snippet("install-guide-uwsgi.sh", (":8778", f"127.0.0.1:{port}"),
                    ("/usr/local/bin/placement-api", str(BIN / "placement-api"))).split()
    assert argv[0] == "uwsgi"
    deployment.start("uwsgi", [str(BIN / "uwsgi"), *argv[1:]], base + "/")
    _exercise(base)


def test_devstack_apache_proxy_to_uwsgi_under_placement(deployment: _Deployment) -> None:
    """devstack's lib/placement: write_uwsgi_config (lib/apache) with
    ``placement.wsgi.api:application`` and url ``/placement``: the uwsgi ini on a
    unix socket, Apache's ``ProxyPass "/placement" "unix:...|uwsgi://..."``, uwsgi
    started as run_process does. Changed: the socket's directory, API_WORKERS=2,
    WORKER_TIMEOUT=90, Apache's address."""
    _require(_apache_missing() or _uwsgi_missing())
    socket = deployment.dir / "logs" / "placement-api.socket"
    ini = _uwsgi_ini(deployment, "placement-uwsgi", _snippet(
        "devstack-placement-uwsgi.ini", ("/var/run/uwsgi/placement-api.socket", str(socket))))
    uwsgi = _Process("uwsgi", [str(BIN / "uwsgi"), "--procname-prefix", "placement", "--ini",
                               str(ini)], deployment.dir / "logs" / "uwsgi.out",
                     _env(OS_PLACEMENT_CONFIG_DIR=str(deployment.dir)), deployment.dir)
    deployment.processes.append(uwsgi)
    port = free_port()
    body = f"Listen 127.0.0.1:{port}\n" + _snippet(
        "devstack-apache-proxy.conf", ("/var/run/uwsgi/placement-api.socket", str(socket)))
    base = f"http://127.0.0.1:{port}/placement"
    deployment.start_apache(body, base + "/")
    _exercise(base, prefix="/placement")
    # devstack's health check asks for the prefix itself, without a slash.
    status, _, root = _call(base, token=None)
    assert status == 200 and root["versions"][0]["links"] == ROOT_LINKS


def test_placement_api_run_as_a_program(deployment: _Deployment) -> None:
    """pbr's wsgi_scripts behaviour: ``placement-api --port N --host IP -- [options]``."""
    port = free_port()
    refused = _run(BIN / "placement-api", "--port", str(port), "--",
                   "--config-file", deployment.conf)
    assert refused.returncode == 2 and "noauth2" in refused.stderr  # every address
    assert _run(BIN / "placement-api", "--port", str(port), "stray").returncode == 2
    base = f"http://127.0.0.1:{port}"
    deployment.start("placement-api", [str(BIN / "placement-api"), "--host", "127.0.0.1",
                                       "--port", str(port), "--", "--config-file",
                                       str(deployment.conf)], base + "/")
    _exercise(base)
    server = deployment.processes[-1].process
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0
