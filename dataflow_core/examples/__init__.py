"""Worked examples of the public APIs: a custom WindowFn, a custom trigger, a two-stage
pipeline. They are pure model code, like `dataflow_core.model`."""
