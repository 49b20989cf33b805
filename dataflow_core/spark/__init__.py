"""Spark adapter: the session factory, Delta jar cache and tables by name.

Import the submodules (`session`, `tables`, `jars`) directly; this package imports
nothing so that pure-Python code never starts a JVM by accident.
"""
