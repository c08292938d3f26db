"""Small helpers that read a YAML mapping with errors naming the key path and the fix."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from .._errors import SpaceError

_MISSING = object()

_TYPE_NAMES = {bool: "true/false", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping"}


def did_you_mean(word: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""


class Section:
    """A mapping from the file, read key by key; `done()` rejects keys nobody asked for."""

    def __init__(self, data: Any, path: str) -> None:
        if not isinstance(data, Mapping):
            raise SpaceError(path or "<top level>", f"must be a mapping, got {_describe(data)}",
                             "write 'key: value' lines")
        self.data = data
        self.path = path
        self._seen: set[str] = set()

    def child(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, types: type | tuple[type, ...], default: Any = _MISSING) -> Any:
        self._seen.add(key)
        if key not in self.data or self.data[key] is None and default is not _MISSING:
            if default is _MISSING:
                typo = difflib.get_close_matches(key, [str(k) for k in self.data], n=1, cutoff=0.6)
                fix = f"did you mean '{key}' where you wrote '{typo[0]}'?" if typo and key not in self.data \
                    else f"add '{key}:' to {self.path or 'the file'}"
                raise SpaceError(self.child(key), "is required", fix)
            return default
        return check_type(self.data[key], types, self.child(key))

    def section(self, key: str, required: bool = False) -> Section:
        value = self.get(key, dict, _MISSING if required else {})
        return Section(value, self.child(key))

    def done(self, allowed: Iterable[str] = ()) -> None:
        known = self._seen | set(allowed)
        for key in self.data:
            if key not in known:
                hint = did_you_mean(str(key), known)
                raise SpaceError(self.child(str(key)), "is not a known key",
                                 hint or f"known keys here: {', '.join(sorted(known))}")


def check_type(value: Any, types: type | tuple[type, ...], path: str) -> Any:
    types = types if isinstance(types, tuple) else (types,)
    # YAML's true is an int to Python; a number where true/false is meant (or the reverse) is a mistake.
    if isinstance(value, bool) and bool not in types:
        ok = False
    elif float in types and isinstance(value, int) and not isinstance(value, bool):
        return float(value) if int not in types else value
    else:
        ok = isinstance(value, types)
    if not ok:
        wanted = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)
        raise SpaceError(path, f"must be {wanted}, got {_describe(value)}", f"write {wanted} here")
    return value


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return f"{str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value!r}"[:80]
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__
