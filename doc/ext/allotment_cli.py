"""``{allotment-cli} PROGRAM``: a command's help, from its argparse parser.

``allotment`` (``allotment.cli.build_parser``), ``placement-manage`` and
``placement-status`` (parsers that oslo.config builds from their registered
command-line options: read back after parsing an empty command line with an
empty configuration). Each sub-command, at any depth, gets a section with its
``--help`` text, so the page is what the commands print.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from generated_markdown import GeneratedMarkdown
from oslo_config import cfg
from sphinx.application import Sphinx

WIDTH = "88"


def _oslo_parser(conf: cfg.ConfigOpts, prog: str, command: list[str]
                 ) -> argparse.ArgumentParser:
    """The parser oslo.config built for ``conf``'s command-line options (read
    back after parsing ``command``, which the parser requires)."""
    with tempfile.TemporaryDirectory() as empty:
        conf(["--config-file", os.devnull, "--config-dir", empty, *command],
             project="placement",
             prog=prog, default_config_files=[], default_config_dirs=[])
    return conf._oparser


def manage_parser() -> argparse.ArgumentParser:
    from allotment import manage

    with tempfile.TemporaryDirectory() as empty:
        conf, _ = manage.parse(["--config-file", os.devnull, "--config-dir", empty])
    return conf._oparser


def status_parser() -> argparse.ArgumentParser:
    from oslo_upgradecheck import upgradecheck as oslo_upgradecheck

    from allotment import config, upgradecheck

    conf = cfg.ConfigOpts()
    config.register_opts(conf)
    oslo_upgradecheck.register_cli_options(conf, upgradecheck.Checks(conf))
    return _oslo_parser(conf, "placement-status", ["upgrade", "check"])


def allotment_parser() -> argparse.ArgumentParser:
    from allotment import cli

    return cli.build_parser()


PARSERS = {
    "allotment": allotment_parser,
    "placement-manage": manage_parser,
    "placement-status": status_parser,
}


def walk(parser: argparse.ArgumentParser, words: list[str]
         ) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """(command words, parser) for ``parser`` and each sub-command under it."""
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, [*words, name])


class CommandHelp(GeneratedMarkdown):
    """A section per command and sub-command, with what ``--help`` prints."""

    required_arguments = 1
    optional_arguments = 0

    def markdown(self) -> str:
        program = self.arguments[0]
        saved = os.environ.get("COLUMNS")
        os.environ["COLUMNS"] = WIDTH  # argparse wraps to the terminal's width
        try:
            parts = []
            for words, parser in walk(PARSERS[program](), [program]):
                parts.append("#" * min(len(words) + 1, 3) + f" `{' '.join(words)}`")
                parts.append("```text\n" + parser.format_help().rstrip() + "\n```")
        finally:
            if saved is None:
                del os.environ["COLUMNS"]
            else:
                os.environ["COLUMNS"] = saved
        return "\n\n".join(parts)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("allotment-cli", CommandHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
