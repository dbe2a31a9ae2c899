"""What every layer may use: atomic files, the thread pool, signals, progress, run and step logs, histograms."""
