"""Datasets: layout, generation and verify, the manifest, the run's data check, checked copies, staging."""
