"""How configuration problems are worded: key paths, did-you-mean, pydantic errors as lines."""
from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable, Sequence

from pydantic_core import PydanticCustomError

RULE = "iogen_rule"  # error type of rules that span keys: the message carries its own key paths


class ConfigWarning(UserWarning):
    """A workload setting loaded but has no effect (DLIO ignores it too, or iogen has no use for it)."""


def rule(*messages: str) -> PydanticCustomError:
    """A validation error for a rule over several keys; each message names its keys, one per line."""
    # The message is a format template: double the braces so '{mean, stdev}' survives.
    text = "\n".join(messages).replace("{", "{{").replace("}", "}}")
    return PydanticCustomError(RULE, text)


def key_path(*parts) -> str:
    """Join key parts into the dotted path users write (`reader.batch_size`, `accelerators.h100`)."""
    return ".".join(str(p) for p in parts if p != "")


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """' (did you mean X?)' when a close match exists, else ''."""
    close = difflib.get_close_matches(str(word), list(choices), n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"


def unknown_key(path: str, key: str, allowed: Sequence[str], also_known: Sequence[str] = ()) -> str:
    """The line for a key that is neither iogen's nor DLIO's; did-you-mean looks at both lists."""
    where = f"{path}.{key}" if path else key
    listed = ", ".join(sorted(allowed))
    return f"{where}: unknown key{did_you_mean(key, list(allowed) + list(also_known))}; allowed here: {listed}"


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxtuple, _SHORT.maxset = 2, 4, 4, 4, 4
_SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother = 78, 40, 78


def show(value) -> str:
    """A value as the user wrote it, short enough for one line.

    reprlib stops at a few levels and items, so a huge value is never rendered whole.
    """
    text = _SHORT.repr(value) if isinstance(value, (dict, list, tuple, set, str, int)) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def pydantic_lines(error, prefix: Sequence = ()) -> list[str]:
    """One line per pydantic error: `path = value: what is allowed`."""
    lines = []
    for err in error.errors(include_url=False):
        # Locations hold field names, list indices and (for unions) member tags; keep the first two.
        parts = list(prefix) + [p for p in err["loc"] if isinstance(p, int) or _is_key(p)]
        path = key_path(*parts)
        kind = err["type"]
        msg = err["msg"]
        if kind == RULE:
            lines.extend(err["msg"].split("\n"))
            continue
        if kind == "missing":
            lines.append(f"{path}: required key is missing")
            continue
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        elif msg.startswith("Assertion failed, "):
            msg = msg[len("Assertion failed, "):]
        msg = msg.replace("Input should be", "must be")
        value = err.get("input")
        if kind == "extra_forbidden":
            lines.append(f"{path}: unknown key")
        elif path:
            lines.append(f"{path} = {show(value)}: {msg}")
        else:
            lines.append(msg)
    return lines


def _is_key(part) -> bool:
    # pydantic union member tags look like 'int', 'function-plain[...]', 'list[int]'.
    return isinstance(part, str) and "[" not in part and part not in ("int", "float", "str", "bool", "none")
