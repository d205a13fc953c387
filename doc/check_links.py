"""Fail on any internal link of the built site that leads nowhere.

    python doc/check_links.py doc/build/html

Reads every ``*.html`` under the directory and checks each ``href`` and ``src``
that stays on the site (no scheme, no ``//`` host): the file it names must
exist, and its ``#fragment``, if any, must be an ``id`` (or ``<a name>``) in
that file. External links are not fetched. Sphinx's ``-n`` checks references
between documents; this also catches plain markdown links and anchors (a
heading renamed, a page moved) that Sphinx passes through as they are.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (tag == "a" and name == "name"):
                self.ids.add(value)
            elif (name == "href" and tag in ("a", "link")) or (name == "src" and tag == "img"):
                self.links.append(value)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(root: Path) -> list[str]:
    """``page: link`` for each internal link under ``root`` that does not resolve."""
    pages = {path.resolve(): _parse(path) for path in sorted(root.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # another site (http:, mailto:, //host): not checked here
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(root.resolve())}: {link}"
            if not target.exists():
                broken.append(f"{where} (no such file)")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    broken.append(f"{where} (no such anchor)")
    return broken


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_links.py BUILT_HTML_DIR", file=sys.stderr)
        return 2
    root = Path(argv[0])
    if not root.is_dir():
        print(f"check_links.py: {root} is not a directory", file=sys.stderr)
        return 2
    broken = broken_links(root)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    count = sum(1 for _ in root.rglob("*.html"))
    print(f"check_links.py: {count} pages, {len(broken)} broken internal links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
