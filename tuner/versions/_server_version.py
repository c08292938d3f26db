"""Which version of its engine a space's server command runs, asked of the command's own Python.

SGLang's launch_server has no --version, and its version decides which flags exist (0.5.6's --nsa-* are
0.5.23's --dsa-*). For a command `PYTHON [options] -m MODULE ...` the same interpreter, in the same environment,
is asked for the `__version__` of the package MODULE belongs to (sglang.launch_server: sglang's), else for the
version of the distribution that installed it. The simulator (`python -m tuner.sim`) answers the same
question with the SGLang version of its profile (tuner/sim/__init__.py). A command of another shape (a
script, a container) cannot be asked.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Runs in the server's interpreter, whatever its Python (3.10 and later: packages_distributions).
# find_spec imports the module's parent packages but not the module itself, which for launch_server would
# start the server's imports; the package's own __init__ is what `python -m` imports first anyway.
_PROBE = r"""
import importlib, importlib.util, sys
name = sys.argv[1]
spec = importlib.util.find_spec(name)
if spec is None:
    sys.exit("No module named %r" % name)
package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
version = getattr(importlib.import_module(package), "__version__", None) if package else None
if version is None:
    import importlib.metadata as md
    dists = md.packages_distributions().get(name.partition(".")[0]) or []
    version = md.version(dists[0]) if dists else ""
print(package or name, version)
"""

# Packages whose version is an SGLang version: SGLang's, and the simulator's, which speaks its profile's.
# Another engine of the SGLang family (sgl_jax) has versions of its own, which say nothing of SGLang's flags.
SGLANG_PACKAGES = ("sglang", "tuner.sim")


@dataclass(frozen=True)
class ServerVersion:
    version: str | None
    why_unknown: str | None = None  # what kept the version from being read, when it was not
    package: str | None = None  # the package that answered (sglang, tuner.sim, sgl_jax, ...)

    @property
    def sglang(self) -> str | None:
        """The SGLang version, where the package is SGLang or speaks for it."""
        return self.version if self.package in SGLANG_PACKAGES else None

    def describe(self) -> str:
        if self.version is None:
            return f"of an unknown version ({self.why_unknown})"
        return f"SGLang {self.version}" if self.sglang else f"{self.package} {self.version}"


def probe_version(command: Sequence[str], env: Mapping[str, str], timeout: float = 300.0) -> ServerVersion:
    if "-m" not in command[1:] or command.index("-m", 1) + 1 >= len(command):
        return ServerVersion(None, "server.command is not 'PYTHON -m MODULE', so its Python cannot be asked")
    at = command.index("-m", 1)
    argv = [*command[:at], "-c", _PROBE, command[at + 1]]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return ServerVersion(None, f"{command[0]} could not be asked: {type(exc).__name__}")
    lines = done.stdout.strip().splitlines()
    package, _, version = (lines[-1] if lines else "").strip().partition(" ")
    if done.returncode != 0 or not version.strip():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ServerVersion(None, f"{command[0]} could not tell: {last.strip()[:160]}")
    return ServerVersion(version.strip(), package=package)
