"""Pipelines by name. Each module defining pipelines registers them on import; the modules
imported are the shipped examples (`dataflow_core.examples.pipelines`), those an installed
distribution names in the entry-point group `dataflow.pipelines` (`name = "package.module"`
in its pyproject's `[project.entry-points."dataflow.pipelines"]`), and those
`$DATAFLOW_PIPELINES` names (comma-separated)."""

from __future__ import annotations

import importlib
import os
import pkgutil

from dataflow_core.errors import DataflowError
from dataflow_core.pipelines.spec import PipelineSpec

PIPELINES_ENV = "DATAFLOW_PIPELINES"
ENTRY_POINT_GROUP = "dataflow.pipelines"
_REGISTRY: dict[str, PipelineSpec] = {}
_loaded = False


def register(spec: PipelineSpec) -> PipelineSpec:
    existing = _REGISTRY.get(spec.name)
    if existing is not None and existing is not spec and existing != spec:
        raise DataflowError(f"two pipelines are named {spec.name!r}; pipeline names must be unique")
    for other in _REGISTRY.values():
        if other.name == spec.name:
            continue
        shared = {s.output for s in other.stages} & {s.output for s in spec.stages}
        if shared:
            raise DataflowError(
                f"pipeline {spec.name!r}: stage output {sorted(shared)[0]!r} is already pipeline {other.name!r}'s; "
                "two pipelines would write the same tables (name the stage's output differently)"
            )
    _REGISTRY[spec.name] = spec
    return spec


def replace_registered(spec: PipelineSpec) -> PipelineSpec:
    """Put `spec` in the place of the registered pipeline of its name (the same pipeline,
    its value types inferred from its table by `check.preflight`)."""
    if spec.name not in _REGISTRY:
        raise DataflowError(f"unknown pipeline {spec.name!r}")
    _REGISTRY[spec.name] = spec
    return spec


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from dataflow_core.examples import pipelines as examples

    for info in pkgutil.iter_modules(examples.__path__):
        importlib.import_module(f"{examples.__name__}.{info.name}")
    _load_entry_points()
    for name in filter(None, (m.strip() for m in os.environ.get(PIPELINES_ENV, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise DataflowError(f"${PIPELINES_ENV} names module {name!r}, which cannot be imported: {exc}") from None


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except ImportError as exc:
            raise DataflowError(f"entry point {point.name!r} of group {ENTRY_POINT_GROUP!r} names module "
                                f"{point.value!r}, which cannot be imported: {exc}") from None


def all_pipelines() -> dict[str, PipelineSpec]:
    _load()
    return dict(sorted(_REGISTRY.items()))


def get(name: str) -> PipelineSpec:
    pipelines = all_pipelines()
    if name not in pipelines:
        known = ", ".join(pipelines) or "none"
        raise DataflowError(f"unknown pipeline {name!r} (registered: {known})")
    return pipelines[name]
