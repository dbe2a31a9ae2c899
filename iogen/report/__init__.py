"""The outputs stage: run folders, config.yaml, summary.json, per-epoch stats, reports."""
