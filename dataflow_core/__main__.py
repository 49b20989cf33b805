from dataflow_core.cli import run

run()
