"""The import graph of dataflow_core: the model imports no engine, `spark/` layers import
only downwards and nothing of the packages built on `spark/` (quality, airflow, cli, ...),
nothing imports another module's private names, and there is no cycle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dataflow_core"
LAYERS = ["platform", "input", "execute", "sinks", "jobs"]  # each may import those before it
ABOVE_SPARK = ("quality", "airflow", "cli", "api", "sample", "__main__")
"""Packages of dataflow_core that build on `spark/` (the quality gates run Spark jobs): none of
`spark/` may import them, at any depth (an import inside a function included)."""
ENGINES = ("pyspark", "delta", "airflow", "great_expectations")


@cache
def _imports() -> dict[str, list[tuple[str, list[str]]]]:
    """Per module of dataflow_core, what it imports (module, names), at any depth."""
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        found = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.module, [a.name for a in node.names]))
            elif isinstance(node, ast.Import):
                found += [(a.name, []) for a in node.names]
        out[module] = found
    return out


def test_the_model_imports_no_engine_and_nothing_outside_itself():
    for module, imports in _imports().items():
        if module.startswith("dataflow_core.model"):
            for target, _ in imports:
                assert not target.startswith(ENGINES), (module, target)
                if target.startswith("dataflow_core"):
                    assert target.startswith("dataflow_core.model"), (module, target)


def test_spark_layers_import_only_downwards():
    for module, imports in _imports().items():
        parts = module.split(".")
        if parts[:2] != ["dataflow_core", "spark"] or len(parts) < 4:
            continue
        layer = LAYERS.index(parts[2])
        for target, _ in imports:
            tparts = target.split(".")
            if tparts[:2] == ["dataflow_core", "spark"] and len(tparts) > 2:
                assert tparts[2] in LAYERS, (module, target)
                assert LAYERS.index(tparts[2]) <= layer, f"{module} imports {target}, a layer above it"


def test_spark_imports_nothing_that_builds_on_it():
    for module, imports in _imports().items():
        if not module.startswith("dataflow_core.spark."):
            continue
        for target, _ in imports:
            tparts = target.split(".")
            assert not (tparts[0] == "dataflow_core" and len(tparts) > 1 and tparts[1] in ABOVE_SPARK), (
                f"{module} imports {target}, which builds on spark/")


def test_no_private_names_cross_modules():
    for module, imports in _imports().items():
        for target, names in imports:
            if target.startswith("dataflow_core"):
                private = [n for n in names if n.startswith("_") and not n.startswith("__")]
                assert not private, (module, target, private)


def test_no_import_cycles():
    modules = _imports()
    graph = {m: {t for t, _ in imps if t in modules} for m, imps in modules.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(t):] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [m])
