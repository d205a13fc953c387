"""Side by side: the same requests to upstream Placement 16.0.0 and to allotment.

Both servers run as real processes on loopback, each on a fresh SQLite database
and the same ``placement.conf`` (noauth2, schema synced on start): upstream under
uwsgi from its own venv (bench's helpers start and install it), allotment under
``allotment serve``. Every step of a sequence goes to both; the answers are
normalised (request ids, Date/Server, timestamps and server-made uuids taken
out) and compared field by field. Differences are grouped by a root-cause key.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.clients.live import free_port
from tests.support.bench import BENCH, bench_module

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM_VENV = BENCH / ".upstream-venv"
ALLOTMENT_BIN = Path(sys.executable).parent / "allotment"

# Headers a client reads; the others (Date, Server, request ids, length) are not compared.
COMPARED_HEADERS = ("content-type", "openstack-api-version", "vary", "allow", "location",
                    "cache-control")
PRESENCE_HEADERS = ("last-modified",)

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                     r"[0-9a-fA-F]{12}")
PLACEHOLDER_RE = re.compile(r'"\$(GEN|CGEN)\{([^}]*)\}"')


def _bench_servers() -> Any:
    """bench/servers.py (it imports http_client top-level)."""
    return bench_module("servers")


# --- requests and answers -------------------------------------------------------------


@dataclass
class Step:
    """One request, sent to both servers.

    ``body`` is a JSON value (serialised here) or raw bytes (sent as is). In a JSON
    body the strings ``"$GEN{<provider uuid>}"`` and ``"$CGEN{<consumer uuid>}"`` are
    replaced, per server, by that server's current provider / consumer generation,
    so one divergence does not cascade into every later write.
    """

    method: str
    path: str
    version: str | None = None  # None: no OpenStack-API-Version header
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    token: str | None = "admin"
    raw_body: bytes | None = None

    def describe(self) -> str:
        parts = [f"{self.method} {self.path}"]
        if self.version is not None:
            parts.append(f"[{self.version}]")
        if self.headers:
            parts.append(json.dumps(self.headers, sort_keys=True))
        if self.raw_body is not None:
            parts.append(repr(self.raw_body[:300]))
        elif self.body is not None:
            parts.append(json.dumps(self.body, sort_keys=True)[:300])
        return " ".join(parts)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  # lower-case names, all of them
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class Server:
    """One running server and a raw HTTP client for it (a new connection per request)."""

    def __init__(self, name: str, url: str) -> None:
        self.name = name
        parsed = urllib.parse.urlsplit(url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80

    def send(self, method: str, path: str, headers: dict[str, str],
             body: bytes | None, timeout: float = 30.0) -> Answer:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.putrequest(method, path, skip_accept_encoding=True)
            for name, value in headers.items():
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            data = resp.read()
            return Answer(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def generation(self, provider: str) -> int | None:
        answer = self.send("GET", f"/resource_providers/{provider}",
                           {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.14"},
                           None)
        data = answer.json()
        return data.get("generation") if answer.status == 200 and data else None

    def consumer_generation(self, consumer: str) -> int | None:
        answer = self.send("GET", f"/allocations/{consumer}",
                           {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.28"},
                           None)
        data = answer.json()
        return data.get("consumer_generation") if answer.status == 200 and data else None

    def run(self, step: Step) -> Answer:
        headers: dict[str, str] = {}
        if step.token is not None:
            headers["X-Auth-Token"] = step.token
        if step.version is not None:
            headers["OpenStack-API-Version"] = f"placement {step.version}"
        body: bytes | None = step.raw_body
        if body is None and step.body is not None:
            text = json.dumps(step.body)

            def fill(match: re.Match[str]) -> str:
                kind, ident = match.group(1), match.group(2)
                value = (self.generation(ident) if kind == "GEN"
                         else self.consumer_generation(ident))
                return json.dumps(value)

            body = PLACEHOLDER_RE.sub(fill, text).encode()
        if body is not None and not any(k.lower() == "content-type" for k in step.headers):
            headers["Content-Type"] = "application/json"
        headers.update(step.headers)
        return self.send(step.method, step.path, headers, body)


# --- normalisation and comparison -----------------------------------------------------


class UuidMap:
    """Server-made uuids, replaced by their order of appearance in one answer."""

    def __init__(self, known: set[str]) -> None:
        self.known = known
        self.seen: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        def repl(match: re.Match[str]) -> str:
            value = match.group(0).lower()
            canon = value.replace("-", "")
            if canon in self.known:
                return match.group(0)
            return self.seen.setdefault(canon, f"<uuid-{len(self.seen) + 1}>")

        return UUID_RE.sub(repl, text)


def _scrub(value: Any, uuids: UuidMap) -> Any:
    if isinstance(value, dict):
        return {uuids(k): _scrub(v, uuids) for k, v in value.items() if k != "request_id"}
    if isinstance(value, list):
        return [_scrub(v, uuids) for v in value]
    if isinstance(value, str):
        return uuids(value)
    return value


def normalise(answer: Answer, known: set[str]) -> dict[str, Any]:
    uuids = UuidMap(known)
    out: dict[str, Any] = {"status": answer.status}
    for name in COMPARED_HEADERS:
        value = answer.headers.get(name)
        if value is not None and name == "allow":
            value = ", ".join(sorted(m.strip() for m in value.split(",")))
        if value is not None and name == "location":
            value = uuids(urllib.parse.urlsplit(value).path)
        out[f"header:{name}"] = value
    for name in PRESENCE_HEADERS:
        out[f"header:{name}"] = "present" if name in answer.headers else None
    parsed: Any
    if not answer.body:
        parsed = None
    else:
        try:
            parsed = _scrub(json.loads(answer.body), uuids)
        except ValueError:
            parsed = {"<non-json body>": uuids(answer.body.decode("utf-8", "replace"))}
    out["body"] = parsed
    return out


def _unordered(value: Any) -> Any:
    """The value with every list, at any depth, in one canonical order."""
    if isinstance(value, dict):
        return {k: _unordered(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_unordered(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value


def _canon(value: Any) -> str:
    return json.dumps(_unordered(value), sort_keys=True)


def _ident(value: Any) -> str | None:
    """What names a list member (a provider, a class, a trait), when something does."""
    if isinstance(value, dict):
        for key in ("uuid", "name", "resource_class"):
            if isinstance(value.get(key), str):
                return f"{key}={value[key]}"
    return None


def diff_paths(a: Any, b: Any, path: str = "body") -> list[tuple[str, Any, Any]]:
    """Where two parsed bodies differ: (path, value in a, value in b).

    Lists are compared as multisets: neither API promises an order (providers,
    traits, candidates). Members named by a uuid or name are paired by it and
    compared field by field; ``[-]`` / ``[+]`` are members only upstream / only ours.
    """
    if isinstance(a, dict) and isinstance(b, dict):
        return _diff_dicts(a, b, path)
    if isinstance(a, list) and isinstance(b, list):
        return _diff_lists(a, b, path)
    return [] if a == b else [(path, a, b)]


def _diff_dicts(a: dict, b: dict, path: str) -> list[tuple[str, Any, Any]]:
    """Keys in only one of them, and the differences under the keys in both."""
    found: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b), key=str):
        sub = f"{path}.{key}"
        if key not in a or key not in b:
            found.append((sub, a.get(key, "<absent>"), b.get(key, "<absent>")))
        else:
            found.extend(diff_paths(a[key], b[key], sub))
    return found


def _diff_lists(a: list, b: list, path: str) -> list[tuple[str, Any, Any]]:
    """Two lists as multisets: paired by name when every member has a distinct one."""
    if sorted(map(_canon, a)) == sorted(map(_canon, b)):
        return []
    ids_a = [_ident(x) for x in a]
    ids_b = [_ident(x) for x in b]
    named = (None not in ids_a and None not in ids_b and len(set(ids_a)) == len(a)
             and len(set(ids_b)) == len(b))
    if named:
        return _diff_named(dict(zip(ids_a, a, strict=True)), dict(zip(ids_b, b, strict=True)),
                           path)
    only_a = _unmatched(a, b)
    only_b = _unmatched(b, a)
    if len(only_a) == len(only_b) == 1:
        return diff_paths(only_a[0], only_b[0], f"{path}[*]")
    return [(f"{path}[members]", only_a, only_b)]


def _diff_named(by_a: dict, by_b: dict, path: str) -> list[tuple[str, Any, Any]]:
    """Members paired by name: ``[-]`` only in a, ``[+]`` only in b, else their differences."""
    found: list[tuple[str, Any, Any]] = []
    for ident in sorted(set(by_a) | set(by_b), key=str):
        if ident not in by_b:
            found.append((f"{path}[-]", by_a[ident], "<absent>"))
        elif ident not in by_a:
            found.append((f"{path}[+]", "<absent>", by_b[ident]))
        else:
            found.extend(diff_paths(by_a[ident], by_b[ident], f"{path}[{ident}]"))
    return found


def _unmatched(items: list, others: list) -> list:
    """The members of ``items`` left once each is paired with an equal one of ``others``."""
    counts: dict[str, int] = {}
    for item in others:
        counts[_canon(item)] = counts.get(_canon(item), 0) + 1
    left = []
    for item in items:
        if counts.get(_canon(item), 0):
            counts[_canon(item)] -= 1
        else:
            left.append(item)
    return left


def route_of(step: Step) -> str:
    """The endpoint a step hits, with uuids and names as placeholders."""
    path = step.path.split("?", 1)[0]
    segments = path.split("/")
    out = []
    for index, seg in enumerate(segments):
        prev = segments[index - 1] if index else ""
        if UUID_RE.fullmatch(seg) or prev in ("resource_providers", "allocations"):
            out.append("{id}")
        elif prev in ("resource_classes", "traits", "inventories"):
            out.append("{name}")
        else:
            out.append(seg)
    return "/".join(out) or "/"


def _field_key(path: str) -> str:
    path = re.sub(r"\[[^\]]*\]", "[*]", path)
    path = UUID_RE.sub("{uuid}", path)
    path = re.sub(r"<uuid-\d+>", "{uuid}", path)
    # Provider uuids, resource class and trait names as dict keys: one key for all.
    path = re.sub(r"\.(CUSTOM_[A-Z0-9_]+|[A-Z][A-Z0-9_]+)(?=\.|$|\[)", ".{name}", path)
    return path


def _detail_template(detail: str) -> str:
    """Upstream's explanation with values taken out: tells one wording from another."""
    text = detail.split("\n\n", 1)[-1].strip()
    text = UUID_RE.sub("U", text)
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "S", text)
    text = re.sub(r"\d+", "N", text)
    text = re.sub(r"\s+", " ", text)
    return text[:48] or "<empty>"


@dataclass
class Difference:
    index: int
    step: Step
    key: str
    fields: list[tuple[str, Any, Any]]
    upstream: dict[str, Any]
    allotment: dict[str, Any]


def _limited_shape(body: Any) -> Any:
    """What a limited candidates answer promises: how many, each with its summaries."""
    if not isinstance(body, dict) or "allocation_requests" not in body:
        return body
    requests = body["allocation_requests"]
    summaries = body.get("provider_summaries", {})

    def providers(request: dict[str, Any]) -> list[str]:
        allocations = request.get("allocations", {})
        if isinstance(allocations, list):  # before 1.12
            return [item["resource_provider"]["uuid"] for item in allocations]
        return list(allocations)

    return {"allocation_requests (count)": len(requests),
            "every provider summarised": all(rp in summaries for request in requests
                                             for rp in providers(request))}


def compare(index: int, step: Step, up: dict[str, Any], ours: dict[str, Any]
            ) -> Difference | None:
    if (step.method == "GET" and step.path.startswith("/allocation_candidates?")
            and "limit=" in step.path and up["status"] == ours["status"] == 200):
        # Which candidates a limit keeps is not specified: upstream keeps the
        # first of its query's order, allotment those of the lowest provider ids.
        up = dict(up, body=_limited_shape(up["body"]))
        ours = dict(ours, body=_limited_shape(ours["body"]))
    fields: list[tuple[str, Any, Any]] = []
    for name in up:
        if name == "body":
            continue
        if up[name] != ours[name]:
            fields.append((name, up[name], ours[name]))
    fields.extend(diff_paths(up["body"], ours["body"]))
    if not fields:
        return None
    names = sorted({_field_key(f[0]) for f in fields})
    for name, a, _ in fields:
        if name.endswith(".detail") and isinstance(a, str):
            names = [n + f"~{_detail_template(a)!r}" if n == _field_key(name) else n
                     for n in names]
            break
    if len(names) > 4:
        names = [*names[:4], "..."]
    key = (f"{step.method} {route_of(step)} {up['status']}/{ours['status']} "
           f"{','.join(names)}")
    return Difference(index, step, key, fields, up, ours)


# --- servers --------------------------------------------------------------------------


# The PostgreSQL server the side-by-side run creates its two databases on.
POSTGRESQL_URL = os.environ.get("ALLOTMENT_SIDEBYSIDE_POSTGRESQL_URL",
                                "postgresql://postgres@127.0.0.1:5432")


@contextlib.contextmanager
def two_servers(workdir: Path | None = None, backend: str = "sqlite"
                ) -> Iterator[tuple[Server, Server]]:
    """Upstream (uwsgi) and allotment, each on a fresh database of ``backend``
    (sqlite or postgresql; each server its own), same config."""
    bench = _bench_servers()
    bench.ensure_upstream_venv(UPSTREAM_VENV)
    with contextlib.ExitStack() as stack:
        if workdir is None:
            # tmpfs when there is one: upstream's SQLite commits are fsync-bound.
            shm = Path("/dev/shm")
            base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(
                prefix="sidebyside-", dir=base)))
        databases = bench.DatabaseFactory(backend, workdir, POSTGRESQL_URL, sys.executable)
        databases.check()
        running = []
        commands = {
            "upstream": bench.ServerCommand("upstream", str(UPSTREAM_VENV / "bin" / "uwsgi"),
                                            1, 1),
            "allotment": bench.ServerCommand("allotment", str(ALLOTMENT_BIN), 1, 1),
        }
        for name, command in commands.items():
            directory = workdir / name
            database = databases.create(f"sidebyside_{name}")
            stack.callback(databases.destroy, database)
            conf = bench.write_config(directory, database.url_for(name))
            server = bench.RunningServer(command, conf, free_port(), directory / "server.log")
            running.append(server)
        # Start both at once: upstream's start is the slow one.
        try:
            with ThreadPoolExecutor(2) as pool:
                for future in [pool.submit(s.start, 120.0) for s in running]:
                    future.result()
            yield (Server("upstream", running[0].url), Server("allotment", running[1].url))
        finally:
            for server in running:
                server.stop()


# --- the run and its report -----------------------------------------------------------


@dataclass
class Result:
    compared: int
    differences: list[Difference]
    seconds: float
    statuses: dict[str, int] = field(default_factory=dict)  # "METHOD route up/ours" -> n

    def groups(self) -> list[tuple[str, list[Difference]]]:
        by_key: dict[str, list[Difference]] = {}
        for diff in self.differences:
            by_key.setdefault(diff.key, []).append(diff)
        return sorted(by_key.items(), key=lambda item: (-len(item[1]), item[0]))

    def report(self, examples: int = 1, allowed: set[str] | None = None) -> str:
        allowed = allowed or set()
        lines = [f"side by side: {self.compared} requests compared in {self.seconds:.1f} s, "
                 f"{len(self.differences)} differ, {len(self.groups())} root-cause keys"]
        for key, diffs in self.groups():
            mark = " (allowed)" if key in allowed else ""
            lines.append("")
            lines.append(f"== {len(diffs)} x {key}{mark}")
            for diff in diffs[:examples]:
                lines.append(f"   #{diff.index} {diff.step.describe()}")
                for name, a, b in diff.fields[:6]:
                    a_text, b_text = _pair(a, b)
                    lines.append(f"     {name}:")
                    lines.append(f"       upstream:  {a_text}")
                    lines.append(f"       allotment: {b_text}")
                if len(diff.fields) > 6:
                    lines.append(f"     ... {len(diff.fields) - 6} more fields")
        lines.append("")
        lines.append("answers by endpoint (upstream/allotment status: count):")
        for pair, count in sorted(self.statuses.items()):
            lines.append(f"   {count:5d}  {pair}")
        return "\n".join(lines)


def _common_prefix_length(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share from their start."""
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _pair(a: Any, b: Any, limit: int = 300) -> tuple[str, str]:
    """Both values as text; long strings from a little before where they part."""
    if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > limit:
        common = _common_prefix_length(a, b)
        start = max(0, common - 60)
        lead = "..." if start else ""
        return (lead + repr(a[start:start + limit]), lead + repr(b[start:start + limit]))
    return _short(a, limit), _short(b, limit)


def _short(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, sort_keys=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def known_uuids(steps: list[Step]) -> set[str]:
    """Every uuid the client itself chose: these are kept as they are in answers."""
    found: set[str] = set()
    for step in steps:
        text = step.path + json.dumps(step.body) + (step.raw_body or b"").decode(
            "utf-8", "replace")
        found.update(m.group(0).lower().replace("-", "") for m in UUID_RE.finditer(text))
    return found


def run(steps: list[Step], upstream: Server, allotment: Server) -> Result:
    started = time.monotonic()
    known = known_uuids(steps)
    differences: list[Difference] = []
    statuses: dict[str, int] = {}
    with ThreadPoolExecutor(2) as pool:
        for index, step in enumerate(steps):
            futures = [pool.submit(upstream.run, step), pool.submit(allotment.run, step)]
            up, ours = (f.result() for f in futures)
            pair = f"{step.method} {route_of(step)} {up.status}/{ours.status}"
            statuses[pair] = statuses.get(pair, 0) + 1
            diff = compare(index, step, normalise(up, known), normalise(ours, known))
            if diff is not None:
                differences.append(diff)
    return Result(len(steps), differences, time.monotonic() - started, statuses)
