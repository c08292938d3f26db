"""`--server-python PATH` of run, check and confirm: the Python that runs the server's `-m MODULE`, where the
engine lives in another environment (a venv or conda env of its own), without editing the space file.

It replaces the first element of the server command (server.command, the engine's default, or the simulator's
`python -m tuner.sim`). The server still runs as that argv list, never through a shell.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence

from ._errors import UsageError

FIX = "pass the python of the environment that has SGLang, e.g. --server-python /opt/sglang/bin/python"


def resolve_python(path: str | None) -> str | None:
    """The absolute path of `path` (a path, or a name on PATH), where it is an executable file; None where not
    given. A venv's python is a link to the base interpreter: it is not resolved, or the venv would be lost."""
    if path is None:
        return None
    expanded = os.path.expanduser(path)
    found = shutil.which(expanded)
    if found is None:
        if os.path.isdir(expanded):
            raise UsageError(f"--server-python {path} is a folder, not a python", FIX)
        if os.path.exists(expanded):
            raise UsageError(f"--server-python {path} is not executable", FIX)
        where = "does not exist" if os.sep in expanded else "is not on PATH"
        raise UsageError(f"--server-python {path} {where}", FIX)
    return os.path.abspath(found)


def with_python(command: Sequence[str], python: str | None) -> tuple[str, ...]:
    """The server command with its Python replaced by `python` (already resolved); unchanged where None."""
    if python is None:
        return tuple(command)
    if len(command) < 3 or command[1] != "-m":
        raise UsageError(f"--server-python replaces the python of a 'PYTHON -m MODULE' server command; this one is "
                         f"'{shlex.join(command)}'", "drop --server-python and set server.command in the space file")
    return (python, *command[1:])
