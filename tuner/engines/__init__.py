"""Engines: everything that differs between SGLang and vLLM."""

from __future__ import annotations

from ._base import CheckSkipped, Completion, Engine, StreamEvent, flag_argv, prompt_ids_from_server
from ._sglang import SGLang
from ._sglang_versions import NOTES, RENAMES, Flag, flags, listed, release, versions


def get_engine(name: str) -> Engine:
    if name == "sglang":
        return SGLang()
    if name == "vllm":
        from ._vllm import VLLM

        return VLLM()
    raise KeyError(name)


__all__ = ["NOTES", "RENAMES", "CheckSkipped", "Completion", "Engine", "Flag", "SGLang", "StreamEvent", "flag_argv",
           "prompt_ids_from_server", "flags", "get_engine", "listed", "release", "versions"]
