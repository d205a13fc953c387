"""Turning measurements into the markdown table (and JSON) of a run.

Ratios are always ours/upstream from the same run: for times lower is better for
allotment, for rates higher is better. A request that hit the timeout shows as
">T s", and its ratio as a bound.
"""

from __future__ import annotations

from collections import defaultdict

from measure import Timing
from scenarios import Measurement

OURS, THEIRS = "allotment", "upstream"


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def fmt_rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1f}/s"


def _errors(timing: Timing) -> str:
    bad = {status: n for status, n in timing.statuses.items() if not 200 <= status < 300}
    if not bad:
        return ""
    return " (" + ", ".join(f"{n}x{status}" for status, n in sorted(bad.items())) + ")"


class Cell:
    """One implementation's value in one row."""

    def __init__(self, value: float | None, kind: str, timed_out: float | None = None,
                 suffix: str = "", text: str = "") -> None:
        self.value = value
        self.kind = kind  # "time", "rate" or "number" (lower is better)
        self.timed_out = timed_out
        self.suffix = suffix
        self.text = text

    def render(self) -> str:
        if self.text:
            return self.text
        if self.timed_out is not None:
            return f">{self.timed_out:g} s"
        if self.kind == "number":
            shown = "-" if self.value is None else f"{self.value:.2f}"
        else:
            shown = fmt_time(self.value) if self.kind == "time" else fmt_rate(self.value)
        return shown + self.suffix


def ratio(ours: Cell | None, theirs: Cell | None) -> str:
    if ours is None or theirs is None or ours.text or theirs.text:
        return ""
    if ours.kind == "time":
        if ours.timed_out is not None and theirs.timed_out is not None:
            return "both timed out"
        if theirs.timed_out is not None and ours.value is not None:
            return f"<{ours.value / theirs.timed_out:.3g}"
        if ours.timed_out is not None and theirs.value:
            return f">{ours.timed_out / theirs.value:.3g}"
    if not ours.value or not theirs.value:
        return "-"
    return f"{ours.value / theirs.value:.3g}"


def rows_for(kind: str, found: dict[str, Measurement]) -> list[tuple[str, dict[str, Cell]]]:
    """The table rows of one (scenario, label, kind) for every implementation."""
    rows: list[tuple[str, dict[str, Cell]]] = []
    if kind == "load":
        cells = {impl: Cell(m.seconds, "time", suffix=f" ({m.requests} req)")
                 for impl, m in found.items()}
        return [("load time (concurrent)", cells)]
    if any(m.note for m in found.values()):
        note = next(m.note for m in found.values() if m.note)
        return [("latency", {impl: Cell(None, "time", text=note) for impl in found})]
    if kind == "loop":
        return loop_rows({impl: m.loop for impl, m in found.items()})
    if kind == "memory":
        return [("resident memory per worker (largest)",
                 {impl: Cell(max(m.rss) / 2**20 if m.rss else None, "number", suffix=" MB")
                  for impl, m in found.items()})]
    timings = {impl: m.timing for impl, m in found.items() if m.timing is not None}
    if kind == "latency":
        n = {impl: len(t.samples) for impl, t in timings.items()}
        rows.append((f"latency median (n={'/'.join(map(str, n.values()))})",
                     {impl: Cell(t.median, "time", t.timed_out, _errors(t))
                      for impl, t in timings.items()}))
        rows.append(("latency p95", {impl: Cell(t.p95, "time", t.timed_out)
                                     for impl, t in timings.items()}))
    elif kind == "throughput":
        conc = max((t.concurrency for t in timings.values()), default=1)
        n = "/".join(str(len(t.samples)) for t in timings.values())
        rows.append((f"throughput, {conc} clients (n={n})",
                     {impl: Cell(t.rate, "rate", t.timed_out, _errors(t))
                      for impl, t in timings.items()}))
    elif kind == "writes":
        conc = max((t.concurrency for t in timings.values()), default=1)
        rows.append((f"PUT /allocations rate, {conc} clients",
                     {impl: Cell(t.rate, "rate", t.timed_out, _errors(t))
                      for impl, t in timings.items()}))
        rows.append(("PUT latency median", {impl: Cell(t.median, "time", t.timed_out)
                                            for impl, t in timings.items()}))
    return rows


def loop_rows(tallies: dict) -> list[tuple[str, dict[str, Cell]]]:
    """The rows of one scheduler loop (``tallies``: impl -> scheduler.LoopTally)."""
    def cells(make) -> dict[str, Cell]:
        return {impl: make(t) for impl, t in tallies.items()}

    def failed(t) -> Cell:
        text = f"{t.failed} of {t.attempted}"
        if t.boots.timed_out is not None:
            text += f", stopped by a request over {t.boots.timed_out:g} s"
        if t.no_candidates:
            text += f", {t.no_candidates} on no candidates"
        if t.errors:
            text += " (" + ", ".join(f"{n}x {what}" for what, n in sorted(t.errors.items())) + ")"
        return Cell(None, "number", text=text)

    def capacity(t) -> Cell:
        if t.over_capacity is None:
            return Cell(None, "number", text=t.check_note or "not checked")
        over = t.over_capacity
        if not over:
            text = f"none ({len(t.touched)} providers read)"
        else:
            text = ", ".join(over[:5]) + (f" and {len(over) - 5} more" if len(over) > 5 else "")
        if t.check_note:
            text += f"; {t.check_note}"
        return Cell(None, "number", text=text)

    schedulers = max((t.schedulers for t in tallies.values()), default=1)
    n = "/".join(str(len(t.boots.samples)) for t in tallies.values())
    return [
        (f"boots/s, {schedulers} schedulers (n={n})",
         cells(lambda t: Cell(t.boots.rate, "rate", t.boots.timed_out))),
        ("boot latency median (GET + PUTs)",
         cells(lambda t: Cell(t.boots.median, "time", t.boots.timed_out))),
        ("boot latency p95", cells(lambda t: Cell(t.boots.p95, "time", t.boots.timed_out))),
        ("409s per boot", cells(lambda t: Cell(t.conflicts / t.attempted if t.attempted
                                               else None, "number"))),
        ("queries per boot", cells(lambda t: Cell(t.queries / t.attempted if t.attempted
                                                  else None, "number"))),
        ("failed boots", cells(failed)),
        ("over capacity", cells(capacity)),
    ]


def _candidates_note(found: dict[str, Measurement]) -> str:
    counts = {impl: m.candidates for impl, m in found.items() if m.candidates is not None}
    if not counts:
        return ""
    values = set(counts.values())
    if len(values) == 1 and len(counts) == len(found):
        count = values.pop()
        return f" [{count} candidate{'' if count == 1 else 's'}]"
    listed = ", ".join(f"{impl} {n}" for impl, n in counts.items())
    return f" [candidates: {listed}" + (" - DIFFER]" if len(values) > 1 else "]")


def table(results: list[Measurement], impls: list[str], titles: dict[str, str]) -> str:
    grouped: dict[tuple[str, str, str], dict[str, Measurement]] = defaultdict(dict)
    for m in results:
        grouped[(m.scenario, m.label, m.kind)][m.impl] = m
    # Two servers: the first over the second (allotment/upstream, or
    # allotment/baseline for an older allotment).
    compare = len(impls) == 2
    header = ["workload", "request", "measure", *impls]
    if compare:
        header.append("ours/upstream" if impls == [OURS, THEIRS] else f"{impls[0]}/{impls[1]}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    last_scenario = last_label = None
    for (scenario, label, kind), found in grouped.items():
        noted = kind == "latency" or kind == "loop"
        shown_label = label + _candidates_note(found) if noted else label
        for measure_name, cells in rows_for(kind, found):
            row = [titles.get(scenario, scenario) if scenario != last_scenario else "",
                   shown_label if (scenario, label) != (last_scenario, last_label) else "",
                   measure_name]
            row += [cells[impl].render() if impl in cells else "-" for impl in impls]
            if compare:
                row.append(ratio(cells.get(impls[0]), cells.get(impls[1])))
            lines.append("| " + " | ".join(row) + " |")
            last_scenario, last_label = scenario, label
    return "\n".join(lines)


def wide_checks(results: list[Measurement], impl: str = OURS) -> list[str]:
    """Our wide-tree limit=10 time against the same query on single-device hosts."""
    medians = {}
    for m in results:
        if m.impl == impl and m.scenario == "wide" and m.kind == "latency" and m.timing:
            medians[m.label] = (m.timing.median, m.timing.timed_out)
    base = medians.get("single-device hosts, limit=10")
    if not base or base[0] is None:
        return []
    lines = []
    for label, (median, timed_out) in medians.items():
        if label.endswith("limit=10") and not label.startswith("single"):
            if median is None:
                lines.append(f"- {impl}: {label}: timed out (>{timed_out:g} s): FAIL")
                continue
            factor = median / base[0]
            verdict = "ok" if factor <= 3 else "FAIL"
            lines.append(f"- {impl}: {label} takes {factor:.2f}x the single-device "
                         f"query ({fmt_time(median)} vs {fmt_time(base[0])}; "
                         f"target <= 3x): {verdict}")
    return lines


def as_json(results: list[Measurement]) -> list[dict]:
    out = []
    for m in results:
        entry = {"impl": m.impl, "scenario": m.scenario, "label": m.label, "kind": m.kind,
                 "candidates": m.candidates, "note": m.note}
        if m.timing is not None:
            entry["timing"] = m.timing.as_dict()
        if m.loop is not None:
            entry["loop"] = m.loop.as_dict()
        if m.rss is not None:
            entry["rss"] = m.rss
        if m.seconds is not None:
            entry["seconds"] = m.seconds
            entry["requests"] = m.requests
        out.append(entry)
    return out
