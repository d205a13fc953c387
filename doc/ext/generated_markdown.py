"""A directive whose body is MyST markdown written by Python at build time.

The reference pages' extensions subclass it: each writes markdown (headings,
tables, lists) from the objects it documents, and the page's own parser turns it
into sections, so generated headings get anchors and appear in the page's
table of contents like written ones.
"""

from __future__ import annotations

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective


class GeneratedMarkdown(SphinxDirective):
    """Render ``self.markdown()`` in place of the directive."""

    has_content = False
    optional_arguments = 1
    final_argument_whitespace = True

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        text = self.markdown()
        holder = nodes.Element()
        self.state.nested_parse(StringList(text.splitlines(), source=f"<{self.name}>"),
                                0, holder, match_titles=True)
        return list(holder.children)


def cell(text: str) -> str:
    """``text`` made safe for one cell of a markdown pipe table."""
    return " ".join(text.split()).replace("|", "\\|")


def code(text: str) -> str:
    """``text`` as inline code, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown pipe table; the cells are markdown already."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
