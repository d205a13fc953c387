"""``{allotment-release-notes}``: the notes in ``releasenotes/notes/*.yaml``.

reno's own Sphinx directive and ``reno report`` read the notes through git
history and group them by tag: with no tag yet, ``reno report`` files every
note under a release "0.0.0" that never was. This reads the YAML files directly, lists them under
the next release in reno's sections and order (``reno.config``), and renders
each note's text as reStructuredText, as reno does.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import yaml
from generated_markdown import GeneratedMarkdown
from reno import config as reno_config
from sphinx.application import Sphinx

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "releasenotes" / "notes"


def read_notes() -> list[tuple[str, dict[str, Any]]]:
    """(file name, its sections) for each note, by file name."""
    return [(path.name, yaml.safe_load(path.read_text()) or {})
            for path in sorted(NOTES.glob("*.yaml"))]


def sections() -> list[tuple[str, str]]:
    """reno's (section id, title) pairs, the prelude first."""
    found = reno_config.Config(str(ROOT)).sections
    return [("prelude", "Prelude")] + [(entry[0], entry[1]) for entry in found]


class ReleaseNotes(GeneratedMarkdown):
    """One heading per release (only the next one for now), a section per kind."""

    option_spec = {"release": str}  # noqa: RUF012 (docutils' interface)

    def markdown(self) -> str:
        notes = read_notes()
        for path in NOTES.glob("*.yaml"):  # rebuild the page when a note changes
            self.env.note_dependency(str(path))
        known = {key for key, _ in sections()}
        for name, content in notes:
            unknown = set(content) - known
            if unknown:
                raise self.error(f"releasenotes/notes/{name}: unknown sections {sorted(unknown)}")
        parts = [f"## {self.options.get('release', 'Unreleased')}"]
        for key, title in sections():
            items = []
            for _, content in notes:
                entries = content.get(key) or []
                items += [entries] if isinstance(entries, str) else entries
            if not items:
                continue
            rst = "\n\n".join("- " + textwrap.indent(item.strip(), "  ")[2:]
                              for item in items)
            parts += [f"### {title}", "```{eval-rst}\n" + rst + "\n```"]
        return "\n\n".join(parts)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("allotment-release-notes", ReleaseNotes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
