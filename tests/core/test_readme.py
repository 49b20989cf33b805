"""The README's commands work after `make demo` (issue 66): every `dataflow` command in its
shell blocks, and every one the demo itself suggests at its end, parses with the CLI's own
parser, names registered pipelines and files that exist, and its SQL reads only tables the
demo writes (its pipelines' tables by `pipelines.layout`, the shared control tables, its
input). Pure: the parser and the registry, no Spark."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from dataflow_core.cli import build_parser
from dataflow_core.examples.jobs.demo import QUERIES, demo_inputs, demo_tables
from dataflow_core.pipelines import all_pipelines

ROOT = Path(__file__).resolve().parents[2]
_BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_OPTIONAL = re.compile(r"\s\[--[^\]]*\]")  # `[--replay]`: a usage line's optional part
_TABLES = re.compile(r"\b(?:FROM|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def dataflow_commands(text: str) -> list[list[str]]:
    """The argument lists of the `dataflow` commands in `text`'s shell blocks (comments,
    redirections and leading VAR=value settings left out)."""
    out = []
    for block in _BLOCK.findall(text):
        for line in block.splitlines():
            words = shlex.split(_OPTIONAL.sub("", line), comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words = words[1:]
            if words and Path(words[0]).name == "dataflow":
                out.append(words[1:words.index(">")] if ">" in words else words[1:])
    return out


def sql_tables(query: str) -> set[str]:
    """The tables a query reads: the names after FROM and JOIN."""
    return set(_TABLES.findall(query))


README_COMMANDS = dataflow_commands((ROOT / "README.md").read_text())
DEMO_COMMANDS = [shlex.split(_OPTIONAL.sub("", q))[1:] for q in QUERIES]


def test_the_readme_and_the_demo_have_commands_to_check():
    assert len(README_COMMANDS) >= 10 and any(c[0] == "sql" for c in README_COMMANDS), README_COMMANDS
    assert sql_tables("SELECT a FROM x LATERAL VIEW explode(w) AS v JOIN y ON 1=1") == {"x", "y"}


@pytest.mark.parametrize("argv", README_COMMANDS + DEMO_COMMANDS, ids=lambda argv: " ".join(argv)[:70])
def test_a_command_parses_and_reads_only_what_the_demo_writes(argv: list[str]):
    parser = build_parser()
    if "--help" in argv:
        with pytest.raises(SystemExit) as done:
            parser.parse_args(argv)
        assert done.value.code == 0
        return
    args = parser.parse_args(argv)  # an unknown option or command exits 2 here
    if getattr(args, "pipeline", None) is not None:
        assert args.pipeline in all_pipelines(), args.pipeline
    for word in argv:
        if word.endswith((".yaml", ".yml")):
            assert (ROOT / word).is_file(), word
    if args.command == "sql":
        tables = sql_tables(args.query)
        assert tables, args.query
        unknown = tables - set(demo_tables()) - set(demo_inputs())
        assert not unknown, f"{args.query!r} reads {sorted(unknown)}, which `make demo` does not write"


def test_the_demo_writes_its_pipelines_tables_and_the_control_tables():
    tables = set(demo_tables())
    assert {"billing", "billing_panes", "ad_sessions", "ad_short_sessions_panes", "ad_sessions__state",
            "billing__quarantine", "dataflow_runs", "dataflow_batches"} <= tables
    assert "video_views_by_window" not in tables  # the dataflow_demo DAG's job writes it, not `make demo`
    assert demo_inputs() == ["video_events"]
