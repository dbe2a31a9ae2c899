"""Runs: the step loop (engine), one invocation on every rank (runner), campaigns, the accelerator search."""
