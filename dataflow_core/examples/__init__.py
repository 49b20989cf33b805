"""Worked examples of the public APIs: a custom WindowFn, a custom trigger, a two-stage
pipeline (its stages built with `dataflow_core.api.stage`, run by the reference runner).
They import no engine: they run wherever the model does."""
