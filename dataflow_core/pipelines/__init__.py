"""Pipelines as the runners take them: an input Delta table, how its columns become the model's
elements, and one or more stages. Users define them with `dataflow_core.api` (`pipeline`,
`stage`), which builds these types and registers them; definitions live in the top-level
`pipelines/` package (one module per pipeline); `registry` finds them by name."""

from dataflow_core.pipelines.spec import PipelineSpec, StageSpec
from dataflow_core.pipelines.registry import all_pipelines, get, register

__all__ = ["PipelineSpec", "StageSpec", "all_pipelines", "get", "register"]
