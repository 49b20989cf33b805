"""The Dataflow model (what / where / when / how) on the lakehouse stack.

`dataflow_core.model` is the engine-agnostic core and imports no Spark, Airflow or
Great Expectations; the other subpackages are adapters around it.
"""

__version__ = "0.1.0"
