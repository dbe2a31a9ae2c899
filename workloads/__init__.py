"""Bundled workloads (installed as package `iogen.workloads`); read with importlib.resources."""
