"""The fitted profile as YAML: the base's file with each fitted figure replaced, its source in a comment beside it.

The base's text is kept (its comments, its order), so that what the fit did not touch reads as before. A header
between HEADER_BEGIN and HEADER_END says how the file was made; a refit replaces it.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import yaml

from ..sim import ProfileError, profile_from_mapping
from ._fit import Fitted

HEADER_BEGIN = "# --- made by `python -m tuner twin fit` ---"
HEADER_END = "# --- end of what twin fit wrote ---"
COMMENT_AT = 39  # the column fitted comments start at, where the value is shorter


def render(base_text: str, fitted: list[Fitted], header: list[str]) -> str:
    lines = _strip_header(base_text.splitlines())
    for f in fitted:
        lines = _set(lines, f)
    head = [HEADER_BEGIN, *(f"# {h}" if h else "#" for h in header), HEADER_END]
    return "\n".join(head + lines) + "\n"


def _strip_header(lines: list[str]) -> list[str]:
    if HEADER_BEGIN in lines and HEADER_END in lines:
        return lines[:lines.index(HEADER_BEGIN)] + lines[lines.index(HEADER_END) + 1:]
    return lines


def _set(lines: list[str], f: Fitted) -> list[str]:
    """Replace `  key: value  # ...` inside `section:`, or add it at the section's end."""
    start = next((i for i, line in enumerate(lines) if line.rstrip() == f"{f.section}:"), None)
    if start is None:
        return lines + [f"{f.section}:", _line(f)]
    end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))),
               len(lines))
    pattern = re.compile(rf"^  {re.escape(f.key)}:")
    for i in range(start + 1, end):
        if pattern.match(lines[i]):
            return lines[:i] + [_line(f)] + lines[i + 1:]
    last = max(i for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#"))
    return lines[:last + 1] + [_line(f)] + lines[last + 1:]


def _line(f: Fitted) -> str:
    text = f"  {f.key}: {f.value:g}"
    return f"{text.ljust(COMMENT_AT - 2)}  # {f.comment()}"


def write(path: Path, text: str) -> None:
    """Checked that it loads as a profile, then written whole (a temporary file renamed over the target)."""
    try:
        profile_from_mapping(yaml.safe_load(text), str(path))
    except (ProfileError, yaml.YAMLError) as exc:  # a bug here, not bad input: say so plainly
        raise RuntimeError(f"the fitted profile does not load: {exc}") from None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, path)
