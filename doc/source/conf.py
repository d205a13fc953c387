"""Sphinx configuration of allotment's documentation site.

Pages are MyST markdown. The reference pages are generated at build time from
the code they describe: options (oslo.config's ``show-options``), policy rules,
the OpenAPI document, the command-line parsers and the release notes
(``doc/ext/``). ``make docs`` builds with warnings as errors and nitpicky
references, then checks every internal link of the HTML (``doc/check_links.py``).
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(DOC / "ext"))

project = "allotment"
author = "allotment's authors"
copyright = "allotment's authors"
release = importlib.metadata.version("allotment")
version = release

extensions = [
    "myst_parser",
    "oslo_config.sphinxext",
    "allotment_policy",
    "allotment_cli",
    "allotment_openapi",
    "allotment_releasenotes",

]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns: list[str] = []

# Headings up to ### get anchors, so pages can link to [a section](page.md#a-section).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# Every cross-reference must resolve.
nitpicky = True

html_theme = "furo"
html_title = f"allotment {release}"
html_static_path = ["_static"]
html_css_files = ["tables.css"]
