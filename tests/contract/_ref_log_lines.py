"""Run by a reference environment's python (SGLang's or vLLM's), never by the tuner's own.

Prints, as JSON, the CUDA graph capture lines that the installed engine's own source writes: every string or
f-string in the package that opens ("... graph begin", "Capturing CUDA graphs") or closes ("... graph end",
"Graph capturing finished") a capture, rendered with sample values, each with the file and line it came from.
vLLM's bar is drawn by the environment's own tqdm, carriage returns and all, as the server's log gets it.
The engine is not imported (SGLang's import needs a GPU stack); its source is read with `ast`.
"""

from __future__ import annotations

import ast
import importlib.util
import io
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path


def _variants(node: ast.AST) -> list[str]:
    """A string expression rendered: a conditional between constants gives each branch, any other value '1'."""
    if isinstance(node, ast.Constant):
        return [node.value] if isinstance(node.value, str) else []
    if isinstance(node, ast.FormattedValue):
        value = node.value
        if isinstance(value, ast.IfExp) and all(isinstance(b, ast.Constant) for b in (value.body, value.orelse)):
            return [str(value.body.value), str(value.orelse.value)]
        return ["1"]
    if isinstance(node, ast.JoinedStr):
        parts = [_variants(v) for v in node.values]
        return ["".join(p) for p in itertools.product(*parts)]
    return []


def _strings(package: Path, wanted: Callable[[str], str | None]) -> list[dict]:
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8-sig"), filename=str(path))
        pieces = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in pieces:
                for text in _variants(node):
                    kind = wanted(text)
                    if kind:
                        found.append({"kind": kind, "text": text,
                                      "source": f"{path.relative_to(package.parent)}:{node.lineno}"})
    return found


def sglang() -> list[dict]:
    package = Path(importlib.util.find_spec("sglang").submodule_search_locations[0]) / "srt"

    def wanted(text: str) -> str | None:
        lower = text.lower()
        if not text.startswith("Capture ") or "graph" not in lower:
            return None
        return "begin" if "graph begin" in lower else "end" if "graph end" in lower else None

    lines = _strings(package, wanted)
    for line in lines:  # SGLang's logger prefix (sglang/srt/utils: configure_logger)
        line["text"] = f"[2026-12-05 10:00:01 TP0] {line['text']}\n"
    return lines


def vllm() -> list[dict]:
    from tqdm import tqdm

    package = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])

    def wanted(text: str) -> str | None:
        if text.startswith("Capturing CUDA graphs"):
            return "begin"
        return "end" if text.startswith("Graph capturing finished") else None

    lines = []
    for line in _strings(package, wanted):
        text = line["text"]
        if line["kind"] == "begin":  # a tqdm description, "Capturing CUDA graphs ({}, {})" or plain
            bar = io.StringIO()
            desc = text.format(*["mixed prefill-decode", "PIECEWISE"][:text.count("{}")])
            with tqdm(total=67, desc=desc, file=bar, mininterval=0, ascii=True) as progress:
                progress.update(27)  # the bar's end is what a hang leaves unfinished: cut there
                line["text"] = bar.getvalue()
        else:  # a logger format: "Graph capturing finished in %.0f secs, took %.2f GiB"
            line["text"] = ("(EngineCore_DP0 pid=1) INFO 12-05 10:00:09 [gpu_model_runner.py:1] "
                            + text % tuple([1.0] * text.count("%")) + "\n")
        lines.append(line)
    return lines


if __name__ == "__main__":
    print(json.dumps({"sglang": sglang, "vllm": vllm}[sys.argv[1]]()))
