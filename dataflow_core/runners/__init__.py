"""Runners decide what arrives when; the model (`dataflow_core.model`) decides what comes out."""
