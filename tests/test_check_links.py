"""doc/check_links.py: an internal link to a missing page or anchor is reported."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_links", ROOT / "doc" / "check_links.py")
assert _spec is not None and _spec.loader is not None
check_links = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_links)


def test_missing_pages_and_anchors_are_reported(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="sub/page.html#there">ok</a> <a href="sub/page.html#gone">anchor</a>'
        '<a href="nowhere.html">page</a> <a href="https://example.org/x#y">outside</a>'
        '<a href="#top">own</a> <span id="top"></span> <img src="missing.png">')
    (tmp_path / "sub" / "page.html").write_text(
        '<h2 id="there">x</h2><a href="../index.html#top">back</a><a href="../">dir</a>')
    assert check_links.broken_links(tmp_path) == [
        "index.html: sub/page.html#gone (no such anchor)",
        "index.html: nowhere.html (no such file)",
        "index.html: missing.png (no such file)",
    ]
    assert check_links.main([str(tmp_path / "sub")]) == 0
