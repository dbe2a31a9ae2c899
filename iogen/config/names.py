"""Names that become part of a path: one safe path component, never a way out of a folder.

The workload `name` names the run folder and the checkpoint files, `dataset.file_prefix` the
data files. Each must stay one component inside the folder iogen writes to: no `/` or `\\`,
not `.` or `..`, no NUL and no control characters (a newline in a file name breaks every log
and tool that reads names by line). Folders the user chooses (`dataset.data_folder`,
`output.folder`, ...) may be any path, but never hold a NUL, which no system call accepts.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

# A run folder is `<name>-<UTC stamp>[-label][-N]` and a checkpoint `<name>-epoch<E>-step<S>.ckpt`:
# leave room for those suffixes under NAME_MAX (255 bytes on Linux file systems).
MAX_NAME_BYTES = 160


def component_problem(value: str) -> str | None:
    """Why `value` is not one safe path component (None when it is one)."""
    if value in (".", ".."):
        return f"{value!r} is not a name (it means a folder)"
    for ch in value:
        if ch in "/\\":
            return f"holds {ch!r}: it must be one name, not a path"
        if ch == "\0":
            return "holds a NUL byte"
        if ord(ch) < 32 or ord(ch) == 127:
            return f"holds the control character {ch!r}"
    size = len(value.encode("utf-8", "surrogateescape"))
    if size > MAX_NAME_BYTES:
        return f"is {size} bytes long; a name may have at most {MAX_NAME_BYTES}"
    return None


def folder_problem(value: str) -> str | None:
    """Why `value` cannot be a folder path (None when it can be)."""
    if "\0" in value:
        return "holds a NUL byte"
    return None


def _component(value: str) -> str:
    problem = component_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _folder(value: str) -> str:
    problem = folder_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# A pydantic type for each: errors read `name = '../x': holds '/': it must be one name, not a path`.
PathComponent = Annotated[str, Field(min_length=1), AfterValidator(_component)]
FolderPath = Annotated[str, Field(min_length=1), AfterValidator(_folder)]
