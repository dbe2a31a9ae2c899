"""Time distributions for `computation_time`, `eval_time` and `preprocess_time` (DLIO's forms).

Accepted spellings (seconds):
  0.323                                   constant
  {mean: 0.3, stdev: 0.01}                normal (also with `type: normal`; stdev defaults to 0)
  {type: uniform, min: 0.2, max: 0.4}
  {type: gamma, shape: 2.0, scale: 0.1}
  {type: exponential, scale: 0.1}
  {type: poisson, lam: 1.0}               integer seconds, as DLIO draws it
Draws are clipped at 0: a sleep cannot be negative.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from pydantic_core import core_schema

from .problems import did_you_mean, show

# kind -> (required parameters, optional parameters with defaults)
KINDS: dict[str, tuple[tuple[str, ...], dict[str, float]]] = {
    "constant": (("value",), {}),
    "normal": (("mean",), {"stdev": 0.0}),
    "uniform": (("min", "max"), {}),
    "gamma": (("shape", "scale"), {}),
    "exponential": (("scale",), {}),
    "poisson": (("lam",), {}),
}
# Mapping spellings users write; `constant` is only ever a plain number.
MAPPING_KINDS = ("normal", "uniform", "gamma", "exponential", "poisson")
DIST_KEYS = ("type", "mean", "stdev", "min", "max", "shape", "scale", "lam")
ALLOWED = (
    "a number of seconds >= 0, or {mean, stdev}, {type: uniform, min, max}, "
    "{type: gamma, shape, scale}, {type: exponential, scale}, {type: poisson, lam}"
)
NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class TimeDist:
    """A seeded per-step time distribution in seconds; `sample_ns` draws nanoseconds."""

    kind: str
    params: tuple[tuple[str, float], ...]

    @classmethod
    def constant(cls, seconds: float) -> TimeDist:
        """A fixed time of `seconds`."""
        return cls.parse(seconds)

    @classmethod
    def parse(cls, value) -> TimeDist:
        """Build from a YAML value; ValueError naming every problem and what is allowed."""
        if isinstance(value, TimeDist):
            return value
        if value is None:
            # DLIO treats an absent or empty time as 0.
            return cls("constant", (("value", 0.0),))
        if isinstance(value, dict):
            return cls._from_mapping(value)
        if _is_number(value):
            problem = _check_param(value, strictly_positive=False)
            if problem:
                raise ValueError(f"{problem}; allowed: {ALLOWED}")
            return cls("constant", (("value", value),))
        raise ValueError(f"not a time; allowed: {ALLOWED}")

    @classmethod
    def _from_mapping(cls, mapping: dict) -> TimeDist:
        kind = mapping.get("type", "normal")
        if kind not in MAPPING_KINDS:
            raise ValueError(
                f"type {show(kind)} is not a distribution{did_you_mean(str(kind), MAPPING_KINDS)}; "
                f"allowed types: {', '.join(MAPPING_KINDS)}"
            )
        required, optional = KINDS[kind]
        known = set(required) | set(optional) | {"type"}
        problems = []
        for key in mapping:
            if key not in known:
                problems.append(
                    f"{key}: not a parameter of a {kind} distribution{did_you_mean(str(key), known)}"
                    f" (it takes {', '.join(required + tuple(optional))})"
                )
        for key in required:
            if key not in mapping:
                problems.append(f"{key}: required by a {kind} distribution")
        params = dict(optional)
        for key in required + tuple(optional):
            if key in mapping:
                positive = kind == "gamma" and key == "shape"
                problem = _check_param(mapping[key], strictly_positive=positive)
                if problem:
                    problems.append(f"{key} = {show(mapping[key])}: {problem}")
                params[key] = mapping[key]
        if not problems and kind == "uniform" and params["min"] > params["max"]:
            problems.append(f"min {params['min']} is greater than max {params['max']}")
        if problems:
            raise ValueError("; ".join(problems))
        return cls(kind, tuple((k, params[k]) for k in required + tuple(optional)))

    def param(self, name: str) -> float:
        """One parameter of the distribution, in seconds (gamma's shape has no unit)."""
        return dict(self.params)[name]

    def sample_ns(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """`n` draws in nanoseconds (int64), clipped at 0."""
        p = dict(self.params)
        if self.kind == "constant" or (self.kind == "normal" and p["stdev"] == 0):
            seconds = np.full(n, float(p.get("value", p.get("mean"))))
        elif self.kind == "normal":
            seconds = rng.normal(p["mean"], p["stdev"], n)
        elif self.kind == "uniform":
            seconds = rng.uniform(p["min"], p["max"], n)
        elif self.kind == "gamma":
            seconds = rng.gamma(p["shape"], p["scale"], n)
        elif self.kind == "exponential":
            seconds = rng.exponential(p["scale"], n)
        else:
            seconds = rng.poisson(p["lam"], n).astype(np.float64)
        return np.clip(np.rint(seconds * NS_PER_S), 0, None).astype(np.int64)

    @property
    def mean_s(self) -> float:
        """Mean of the distribution in seconds (before clipping at 0)."""
        p = dict(self.params)
        return float({
            "constant": lambda: p["value"],
            "normal": lambda: p["mean"],
            "uniform": lambda: (p["min"] + p["max"]) / 2,
            "gamma": lambda: p["shape"] * p["scale"],
            "exponential": lambda: p["scale"],
            "poisson": lambda: p["lam"],
        }[self.kind]())

    @property
    def stdev_s(self) -> float:
        """Standard deviation of the distribution in seconds (before clipping at 0)."""
        p = dict(self.params)
        return float({
            "constant": lambda: 0.0,
            "normal": lambda: p["stdev"],
            "uniform": lambda: (p["max"] - p["min"]) / math.sqrt(12),
            "gamma": lambda: math.sqrt(p["shape"]) * p["scale"],
            "exponential": lambda: p["scale"],
            "poisson": lambda: math.sqrt(p["lam"]),
        }[self.kind]())

    @property
    def is_zero(self) -> bool:
        """True when every draw is 0 s."""
        return self.mean_s == 0 and self.stdev_s == 0

    def describe(self) -> str:
        """Readable form, e.g. '0.323 s' or 'normal(mean 0.3 s, stdev 0.01 s)'."""
        p = dict(self.params)
        if self.kind == "constant" or (self.kind == "normal" and p["stdev"] == 0):
            return f"{_g(self.mean_s)} s"
        if self.kind == "normal":
            return f"normal(mean {_g(p['mean'])} s, stdev {_g(p['stdev'])} s)"
        if self.kind == "uniform":
            return f"uniform({_g(p['min'])} s .. {_g(p['max'])} s)"
        if self.kind == "gamma":
            return f"gamma(shape {_g(p['shape'])}, scale {_g(p['scale'])} s; mean {_g(self.mean_s)} s)"
        if self.kind == "exponential":
            return f"exponential(scale {_g(p['scale'])} s)"
        return f"poisson(lam {_g(p['lam'])} s)"

    def to_config(self):
        """The YAML form: a plain number for constants, else a mapping that `parse` reads back."""
        p = dict(self.params)
        if self.kind == "constant":
            return p["value"]
        if self.kind == "normal":
            return {"mean": p["mean"], "stdev": p["stdev"]}
        return {"type": self.kind, **p}

    def __str__(self) -> str:
        return self.describe()

    @classmethod
    def __get_pydantic_core_schema__(cls, source, handler):
        # Validation goes through `parse`, so a ValueError becomes one error at the field's path.
        return core_schema.no_info_plain_validator_function(
            cls.parse,
            serialization=core_schema.plain_serializer_function_ser_schema(lambda d: d.to_config()),
        )


def _is_number(value) -> bool:
    # YAML booleans are ints in Python; a time of `True` is a mistake, not 1 s.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_param(value, *, strictly_positive: bool) -> str | None:
    if not _is_number(value) or not math.isfinite(value):
        return "must be a finite number"
    if strictly_positive and value <= 0:
        return "must be > 0"
    if value < 0:
        return "must be >= 0 (a time cannot be negative)"
    return None


def _g(x: float) -> str:
    return f"{x:.6g}"
