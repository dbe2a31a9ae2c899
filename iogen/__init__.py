"""iogen: a deep-learning I/O load generator (see README.md and docs/)."""
from ._version import __version__

__all__ = ["__version__"]
