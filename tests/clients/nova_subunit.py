"""Reads subunit v2 streams of nova's test workers; prints each test's outcome as JSON.

Run by nova's venv (python-subunit is there, not in allotment's):
``python nova_subunit.py STREAM...`` prints ``{test id: {"status": ...,
"reason": ..., "details": ...}}``. The status is subunit's (``success``,
``fail``, ``skip``, ``exists`` for a listing, ``inprogress`` for a test whose
worker died); ``reason`` is a skip's, ``details`` the end of a failure's
traceback and captured log. Bytes that are not subunit (a worker's output
before it started its stream) are passed over.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import subunit  # type: ignore[import-not-found]
import testtools

DETAIL_CHARACTERS = 6000


def _text(details: dict[str, Any]) -> str:
    parts = []
    for name in ("traceback", "reason", "pythonlogging", "stderr", "stdout"):
        content = details.get(name)
        if content is not None:
            text = b"".join(content.iter_bytes()).decode("utf-8", errors="replace").strip()
            if text:
                parts.append(f"--- {name} ---\n{text[-DETAIL_CHARACTERS:]}")
    return "\n".join(parts)


def read(paths: list[str]) -> dict[str, dict[str, str]]:
    outcomes: dict[str, dict[str, str]] = {}

    def record(test: Any) -> None:  # a testtools TestDict
        if not test["id"]:
            return  # output outside any test
        details = test["details"]
        outcome = {"status": test["status"]}
        if test["status"] == "skip":
            reason = details.get("reason")
            outcome["reason"] = (b"".join(reason.iter_bytes()).decode(errors="replace")
                                 if reason is not None else "")
        elif test["status"] not in ("success", "exists"):
            outcome["details"] = _text(details)
        outcomes[test["id"]] = outcome

    for path in paths:
        with open(path, "rb") as stream:
            result = testtools.StreamToDict(record)
            result.startTestRun()
            subunit.ByteStreamToStreamResult(stream, non_subunit_name="stdout").run(result)
            result.stopTestRun()
    return outcomes


if __name__ == "__main__":
    json.dump(read(sys.argv[1:]), sys.stdout)
