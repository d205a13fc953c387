"""Mixed serving: upstream Placement 16.0.0 and allotment on one database.

Per backend (PostgreSQL, MariaDB): a database made and filled by upstream is
served by allotment in place, and one made by allotment is served by
upstream, with every read giving the same data through both; then both serve
one database while concurrent clients claim through both until the
providers are full -- with allotment's capacity guard (migration 0002) and
without it -- and upstream alone, for comparison; allotment's history
(migration 0005) must show every accepted claim, upstream's as outside
writes. The figures are printed (``-s`` shows them) and written to
``mixed-serving-report.txt`` in the test's temporary directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients import mixed
from tests.conftest import _backends

pytestmark = pytest.mark.mixed


@pytest.fixture(scope="module", autouse=True)
def upstream_venv() -> None:
    """Upstream 16.0.0's venv (bench/.upstream-venv), built on first use as bench does."""
    mixed.sidebyside._bench_servers().ensure_upstream_venv(mixed.sidebyside.UPSTREAM_VENV)

BACKENDS = [b for b in ("postgresql", "mysql") if b in _backends()]
VCPUS = 32


def _report(tmp_path: Path, lines: list[str]) -> None:
    text = "\n".join(lines)
    print("\n" + text)
    (tmp_path / "mixed-serving-report.txt").write_text(text + "\n")


def _storm_line(name: str, tally: mixed.Tally, over: list[str]) -> str:
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(tally.by_server.items()))
    return f"{name}: {counts}; over capacity: {over or 'none'}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_upstream_database_served_by_allotment(backend: str, tmp_path: Path) -> None:
    lines = [f"== {backend}: database made by upstream"]
    try:
        _upstream_database(backend, tmp_path, lines)
    finally:
        lines += [f"upstream read error: {e}" for e in mixed.UPSTREAM_READ_ERRORS]
        _report(tmp_path, lines)


def _upstream_database(backend: str, tmp_path: Path, lines: list[str]) -> None:
    with mixed.fresh_database(backend) as url:
        mixed.db_sync_upstream(tmp_path, url)
        with mixed.server("upstream", tmp_path, url) as upstream:
            data = mixed.fill(upstream)
            # Upstream alone, no guard: how often it overcommits.
            providers = mixed.make_providers(upstream, 3, VCPUS)
            alone = mixed.storm([upstream], providers)
            mismatches, over = mixed.usage_report(upstream, providers, alone, VCPUS)
            lines.append(_storm_line("upstream alone, no guard", alone, over))
            assert not mismatches, mismatches
            with mixed.server("allotment", tmp_path, url) as allotment:
                # allotment's start upgraded the schema: the guard is in place,
                # upstream's own version table untouched.
                assert mixed.sql(url, "SELECT version_num FROM alembic_version") == [
                    ("a082b8bb98d0",)]
                assert not mixed.compare_reads(upstream, allotment, data)

                for guard in (True, False):
                    mixed.set_guard(url, guard)
                    providers = mixed.make_providers(upstream, 3, VCPUS)
                    tally = mixed.storm([upstream, allotment], providers, threads=16)
                    mismatches, over = mixed.usage_report(allotment, providers, tally, VCPUS)
                    name = f"mixed, guard {'on' if guard else 'off'}"
                    lines.append(_storm_line(name, tally, over))
                    assert not tally.undocumented, tally.undocumented[:5]
                    assert not any(k.startswith("allotment") and "other" in k
                                   for k in tally.by_server)
                    assert not mismatches, mismatches
                    if guard:
                        assert not over, over
                        # Both servers' claims are in allotment's history, upstream's
                        # as outside writes (recorded by the database's triggers;
                        # without the guard the schema is back at 0001, no history).
                        problems = mixed.history_report(allotment, providers, tally, VCPUS)
                        assert not problems, problems[:5]
                        lines.append(f"{name}: history of {len(tally.accepted)} accepted "
                                     "claims and the providers' inventories as expected")
                mixed.set_guard(url, True)
                lines += _over_capacity_rules(upstream, allotment, url)


@pytest.mark.parametrize("backend", BACKENDS)
def test_allotment_database_served_by_upstream(backend: str, tmp_path: Path) -> None:
    with (mixed.fresh_database(backend) as url,
          mixed.server("allotment", tmp_path, url) as allotment):
        data = mixed.fill(allotment)
        with mixed.server("upstream", tmp_path, url) as upstream:
            assert not mixed.compare_reads(upstream, allotment, data)


# --- what a provider already over capacity still accepts ------------------------------


def _rules_sequence(srv: mixed.sidebyside.Server) -> list[int]:
    """Statuses of the over-capacity cases, on a provider made over capacity."""
    import uuid

    rp, other = mixed.make_providers(srv, 2, 8)
    a, b, c = (str(uuid.uuid4()) for _ in range(3))

    def put(consumer: str, allocations: dict[str, int], gen: int | None,
            where: str = rp) -> int:
        body = {"allocations": {where: {"resources": allocations}} if allocations else {},
                "project_id": "p", "user_id": "u", "consumer_generation": gen}
        return mixed.call(srv, "PUT", f"/allocations/{consumer}", body, "1.28").status

    def cgen(consumer: str) -> int:
        return mixed.call(srv, "GET", f"/allocations/{consumer}",
                          version="1.28").json()["consumer_generation"]

    statuses = [put(a, {"VCPU": 4}, None), put(b, {"VCPU": 4}, None)]
    gen = mixed.call(srv, "GET", f"/resource_providers/{rp}").json()["generation"]
    # Shrink the inventory below usage (8 used of 6): both accept that.
    statuses.append(mixed.call(srv, "PUT", f"/resource_providers/{rp}/inventories/VCPU",
                               {"resource_provider_generation": gen, "total": 6}).status)
    statuses += [
        put(c, {"VCPU": 1}, None),                 # a new claim there: refused
        put(a, {"VCPU": 4}, cgen(a)),              # the same again: accepted
        put(a, {"VCPU": 5}, cgen(a)),              # more: refused
        put(a, {"VCPU": 3}, cgen(a)),              # less, still over: accepted
    ]
    # Swap within: b's 4 go to a new consumer c in one POST (a migration).
    body = {b: {"allocations": {other: {"resources": {"VCPU": 4}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": cgen(b)},
            c: {"allocations": {rp: {"resources": {"VCPU": 4}}}, "project_id": "p",
                "user_id": "u", "consumer_generation": None}}
    statuses.append(mixed.call(srv, "POST", "/allocations", body, "1.28").status)
    statuses.append(put(a, {"VCPU": 3}, cgen(a), other))   # move away: accepted
    statuses.append(mixed.call(srv, "DELETE", f"/allocations/{c}").status)  # release
    return statuses


def _over_capacity_rules(upstream: mixed.sidebyside.Server,
                         allotment: mixed.sidebyside.Server, url: str) -> list[str]:
    mixed.set_guard(url, False)
    reference = _rules_sequence(upstream)
    mixed.set_guard(url, True)
    guarded = _rules_sequence(upstream)
    ours = _rules_sequence(allotment)
    assert guarded == reference, (reference, guarded)
    assert ours == reference, (reference, ours)
    return [f"over-capacity cases (upstream without guard = with guard = allotment): "
            f"{reference}"]
