"""Placeholder: fill is being written."""
