"""The ranks: MPI or a world of one behind the same methods, and the watchdog and heartbeat that keep none hanging."""
