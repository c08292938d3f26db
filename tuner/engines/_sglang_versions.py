"""What differs between the SGLang versions the tuner knows: the flags each takes, and what was renamed.

Which flags a version has, their choices and which it calls deprecated come from SGLang's own parser, dumped
into tuner/flags/sglang-<version>.json by scripts/gen_sim_flags.py (the simulator parses with the same
tables). What a flag that is gone became cannot be read from a parser: RENAMES says it, by hand, and
`space upgrade` uses an entry only where the tables show the old name missing (or deprecated) in the target
version and the new one there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from ..flags import VERSIONS, table

# Flags renamed between SGLang versions, both ways: the name to write instead when one is missing. An entry
# "env NAME=V" is an environment variable that took over the flag's job.
RENAMES: Mapping[str, tuple[str, ...]] = {
    "nsa-prefill-backend": ("dsa-prefill-backend",),
    "nsa-decode-backend": ("dsa-decode-backend",),
    "dsa-prefill-backend": ("nsa-prefill-backend",),
    "dsa-decode-backend": ("nsa-decode-backend",),
    "cuda-graph-max-bs": ("cuda-graph-max-bs-decode",),
    "cuda-graph-bs": ("cuda-graph-bs-decode",),
    "cuda-graph-max-bs-decode": ("cuda-graph-max-bs",),
    "cuda-graph-bs-decode": ("cuda-graph-bs",),
    # 0.5.6 captured only decode graphs unless asked for piecewise prefill ones, so its --disable-cuda-graph
    # and 0.5.23's --disable-decode-cuda-graph switch the same graphs; 0.5.23's deprecated --disable-cuda-graph
    # also switches off the prefill graphs that 0.5.23 captures by default (NOTES below says so).
    "disable-decode-cuda-graph": ("disable-cuda-graph",),
    "disable-cuda-graph": ("disable-decode-cuda-graph",),
    "enable-nan-detection": ("env SGLANG_ENABLE_NAN_LOGITS_CHECK=1",),
}

# What a rename leaves different, said when `space upgrade` makes it: (old, new) -> note.
NOTES: Mapping[tuple[str, str], str] = {
    ("disable-cuda-graph", "disable-decode-cuda-graph"):
        "SGLang 0.5.23 also captures prefill CUDA graphs by default, which 0.5.6 did not; add "
        "'disable-prefill-cuda-graph: {type: bool}' to search them too",
}


@dataclass(frozen=True)
class Flag:
    """One long option of one SGLang version, as its parser defines it."""

    name: str  # without the dashes
    choices: tuple[str, ...] | None
    deprecated: bool
    new_spelling: str | None = None  # what the deprecation says to write instead, where it says


def versions() -> tuple[str, ...]:
    """The SGLang versions whose flag tables the tuner ships, oldest first."""
    return tuple(sorted(VERSIONS, key=release))


def listed(names) -> str:
    """Versions for a message: '0.5.6, 0.5.17 and 0.5.23'."""
    names = list(names)
    return " and ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} and {names[-1]}"


def release(version: str) -> tuple[int, ...]:
    """'0.5.23' -> (0, 5, 23); the parts up to the first that is not a number."""
    parts = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


@lru_cache(maxsize=None)
def flags(version: str) -> Mapping[str, Flag]:
    """Every long option of the version's parser (aliases too), by name without dashes."""
    out: dict[str, Flag] = {}
    for spec in table(version):
        help_text = (spec.help or "").lstrip()
        # SGLang marks a deprecation by its action class (DeprecatedStoreTrueAction, ...) or by the help text's
        # first word ("Deprecated. Use ...", "(Deprecated, use ...)").
        deprecated = spec.kind.startswith("Deprecated") or help_text.lstrip("(").lower().startswith("deprecated")
        choices = None if spec.choices is None else tuple(str(c) for c in spec.choices)
        for name in spec.names:
            if name.startswith("--"):
                out[name[2:]] = Flag(name[2:], choices, deprecated, spec.new_flag)
    return out
