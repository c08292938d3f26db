"""A space file's text with flag names changed where they stand, for `space upgrade` (tuner/versions/_upgrade.py).

Flag names stand as keys (server.fixed, params, when, baseline, try-first, forbid) and as values (up-to, the
operands and max of constraints). The text is edited at those scalars only, found through the YAML parser's
node positions, so comments and layout stay; the edit is then parsed and must equal the data renamed the same
way. A change that is not a rename (a fixed flag respelled into two, moved to server.env) writes the file anew
from its data, without the comments, and says so.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import Any

import yaml


def rewrite(text: str, renames: Mapping[str, str], fixed: Mapping[str, Any] | None, env: Mapping[str, str],
            to: str, header: list[str]) -> str:
    """The space's text with flags renamed wherever they stand, server.fixed replaced (None: kept) and `env`
    added to server.env, sglang-version set to `to`, and `header` as comments on top."""
    data = yaml.safe_load(text)
    expected = _renamed(data, renames)
    if fixed is not None or env:
        server = expected["server"]
        server["fixed"] = {renames.get(k, k): v for k, v in (fixed or server.get("fixed") or {}).items()}
        if not server["fixed"]:
            del server["fixed"]
        if env:
            server["env"] = {**(server.get("env") or {}), **env}
        expected["sglang-version"] = to
        header = [*header, "The original's comments are not kept: a fixed flag changed its form."]
        body = yaml.safe_dump(_version_after_engine(expected), sort_keys=False, default_flow_style=None, width=110)
        return _comment(header) + body
    expected["sglang-version"] = to
    edited = _edit(text, renames, to)
    if yaml.safe_load(edited) != expected:  # the text edit must mean exactly the data's rename
        raise AssertionError("space upgrade: the text edit does not match the renamed data")
    return _comment(header) + edited


def _comment(lines: list[str]) -> str:
    wrapped = [part for line in lines
               for part in textwrap.wrap(line, 110, break_long_words=False, break_on_hyphens=False)]
    return "".join(f"# {line}\n" for line in wrapped)


def _version_after_engine(data: dict[str, Any]) -> dict[str, Any]:
    version = data.pop("sglang-version")
    out: dict[str, Any] = {}
    anchor = "engine" if "engine" in data else "name"
    for key, value in data.items():
        out[key] = value
        if key == anchor:
            out["sglang-version"] = version
    out.setdefault("sglang-version", version)
    return out


def _names(data: Any, rename: Callable[[str], str]) -> Any:
    """The space with every flag name renamed where a flag name stands: keys of server.fixed, params,
    when, baseline, try-first and forbid; up-to, and the operands and max of constraints."""
    def keys(m: Any) -> Any:
        return {rename(k) if isinstance(k, str) else k: v for k, v in m.items()} if isinstance(m, dict) else m

    def name(v: Any) -> Any:
        return rename(v) if isinstance(v, str) else v

    out = dict(data)
    if isinstance(out.get("server"), dict) and "fixed" in out["server"]:
        out["server"] = {**out["server"], "fixed": keys(out["server"]["fixed"])}
    if isinstance(out.get("params"), dict):
        params = {}
        for key, p in keys(out["params"]).items():
            if isinstance(p, dict):
                p = {**p, **({"when": keys(p["when"])} if "when" in p else {}),
                     **({"up-to": name(p["up-to"])} if "up-to" in p else {})}
            params[key] = p
        out["params"] = params
    if isinstance(out.get("constraints"), list):
        out["constraints"] = [_constraint(c, keys, name) for c in out["constraints"]]
    if "baseline" in out:
        out["baseline"] = keys(out["baseline"])
    if isinstance(out.get("try-first"), list):
        out["try-first"] = [keys(point) for point in out["try-first"]]
    return out


def _constraint(c: Any, keys: Callable[[Any], Any], name: Callable[[Any], Any]) -> Any:
    if not isinstance(c, dict):
        return c
    c = dict(c)
    for kind in ("product", "divides", "at-most"):
        if isinstance(c.get(kind), list):
            c[kind] = [name(o) for o in c[kind]]
    if "max" in c:
        c["max"] = name(c["max"])
    if "forbid" in c:
        c["forbid"] = keys(c["forbid"])
    return c


def _renamed(data: Any, renames: Mapping[str, str]) -> dict[str, Any]:
    return _names(data, lambda n: renames.get(n, n))


def _edit(text: str, renames: Mapping[str, str], to: str) -> str:
    """The text with each renamed name replaced where it stands, and sglang-version set."""
    root = yaml.compose(text)
    edits: list[tuple[int, int, str]] = []
    # The scalars where flag names stand: the same walk as the data's rename, over the composed nodes, with a
    # rename that records which scalar it was handed.
    seen: list[_Scalar] = []

    def record(name: str) -> str:
        if isinstance(name, _Scalar):
            seen.append(name)
        return name

    _names(_tree(root), record)
    for scalar in seen:
        node = scalar.node
        if node.value in renames:
            start, end = node.start_mark.index, node.end_mark.index
            quote = text[start] if text[start] in "'\"" else ""
            edits.append((start, end, f"{quote}{renames[node.value]}{quote}"))
    version = _get(root, "sglang-version")
    if version is not None:
        edits.append((version.start_mark.index, version.end_mark.index, f'"{to}"'))
    else:
        anchor = _get(root, "engine") or _get(root, "name")
        line_end = text.find("\n", anchor.end_mark.index)
        at = len(text) if line_end < 0 else line_end + 1
        edits.append((at, at, ("" if line_end >= 0 else "\n") + f'sglang-version: "{to}"\n'))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


class _Scalar(str):
    """A scalar's text that remembers its node, so that the walk over the data can say which node it renamed."""

    node: yaml.ScalarNode

    def __new__(cls, node: yaml.ScalarNode) -> _Scalar:
        s = super().__new__(cls, node.value)
        s.node = node
        return s


def _tree(node: yaml.Node) -> Any:
    """The composed YAML as dicts and lists of _Scalar (keys too), for _names to walk."""
    if isinstance(node, yaml.MappingNode):
        return {_tree(k): _tree(v) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [_tree(v) for v in node.value]
    return _Scalar(node)


def _get(mapping: yaml.Node, key: str) -> yaml.Node | None:
    if isinstance(mapping, yaml.MappingNode):
        for k, v in mapping.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None
