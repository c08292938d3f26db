"""Response bodies of SGLang's OpenAI-compatible endpoints (/v1/completions, /v1/chat/completions)."""

from __future__ import annotations

import time
from typing import Any

from ._requests import GenRequest
from ._text import Tokenizer


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens, "prompt_tokens_details": None, "reasoning_tokens": 0}


def finish_fields(req: GenRequest) -> tuple[str | None, Any]:
    if req.finish is None:
        return None, None
    kind = req.finish.get("type")
    if kind == "abort":
        return "abort", None
    return ("length" if kind == "length" else "stop"), req.finish.get("matched")


def completion_logprobs(tok: Tokenizer, req: GenRequest, echo: bool, start: int = 0) -> dict[str, Any]:
    """The legacy completions `logprobs` object, for output tokens [start:] (and the prompt when echoing)."""
    ids: list[int] = []
    values: list[float | None] = []
    tops: list[Any] = []
    if echo and req.in_logprobs is not None:
        ids += req.prompt_ids
        values += req.in_logprobs
        tops += req.in_top if req.in_top is not None else [None] * len(req.in_logprobs)
    ids += req.out_ids[start:]
    values += req.out_logprobs[start:]
    if req.top_logprobs_num:
        tops += req.out_top[start:]
    tokens = [tok.piece(t) for t in ids]
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    top_logprobs = None
    if req.top_logprobs_num:
        top_logprobs = [None if entry is None else {tok.piece(t): lp for lp, t in entry} for entry in tops]
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens, "top_logprobs": top_logprobs}


def chat_logprobs(tok: Tokenizer, req: GenRequest, start: int = 0) -> dict[str, Any]:
    content = []
    for i in range(start, len(req.out_ids)):
        tid = req.out_ids[i]
        piece = tok.piece(tid)
        entry: dict[str, Any] = {"token": piece, "bytes": list(piece.encode("utf-8")), "logprob": req.out_logprobs[i]}
        top = []
        if req.top_logprobs_num and i < len(req.out_top):
            for lp, t in req.out_top[i]:
                p = tok.piece(t)
                top.append({"token": p, "bytes": list(p.encode("utf-8")), "logprob": lp})
        entry["top_logprobs"] = top
        content.append(entry)
    return {"content": content}


def completion_body(rid: str, model: str, choices: list[dict[str, Any]], reqs: list[GenRequest]) -> dict[str, Any]:
    prompt = sum(r.prompt_len for r in reqs[:1]) if reqs else 0
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model, "choices": choices,
            "usage": usage(prompt, sum(r.n_out for r in reqs)), "metadata": {"weight_version": "default"}}


def chat_body(rid: str, model: str, choices: list[dict[str, Any]], reqs: list[GenRequest]) -> dict[str, Any]:
    prompt = reqs[0].prompt_len if reqs else 0
    return {"id": rid, "object": "chat.completion", "created": int(time.time()), "model": model, "choices": choices,
            "usage": usage(prompt, sum(r.n_out for r in reqs)), "metadata": {"weight_version": "default"}}
