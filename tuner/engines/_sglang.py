"""SGLang: `python -m sglang.launch_server`, its native /generate API and its --config file."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from .._failures import FailureKind
from ..flags import VERSIONS, build_parser, refused_config_keys
from ._base import (Completion, Engine, StreamErrorEvent, StreamEvent, check_ids_line_up, decode_json, finite_or_none,
                    flag_argv, patterns, prompt_ids_from_server)

K = FailureKind

# Order matters only for the first match of one line; the log watcher ranks kinds across lines.
SGLANG_FATAL = patterns(
    # An OOM during capture is an OOM: the fix is memory (fraction, max batch size), not the backend.
    # 0.5.17's breakable prefill-graph capture ends in "torch.AcceleratorError: CUDA error: out of memory"
    # (tests/data/sglang-0.5.17-prefill-capture-oom.log, from a real H100).
    (r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|Not enough memory\. |Prefill out of memory"
     r"|Decode out of memory", K.OOM),
    # 0.5.17 names a failed prefill capture "Fail when using backend: breakable for prefill runner."
    # (srt/model_executor/runner_backend_utils/__init__.py, PREFILL_CUDA_GRAPH_CAPTURE_FAILED_MSG).
    (r"Capture (cuda|CUDA) graph failed|Capture .*CUDA graph failed|Fail when using backend: \S+ for prefill runner",
     K.GRAPH_CAPTURE_FAILED),
    (r"NaN detected|NaN in the logits", K.NAN),
    # The scheduler is gone (even where the HTTP process lives on), or the GPU context is lost.
    (r"Scheduler hit an exception|Received sigquit from a child process|Initialization failed\. "
     r"|an illegal memory access was encountered|device-side assert triggered|CUDA error: ", K.CRASH_ON_START),
    # Also printed by a live server for one request (a client that went away, a response that failed to
    # encode): it explains an exit, but is no crash while the server lives.
    (r"Traceback \(most recent call last\)", K.CRASH_ON_START, False),
)


def _graphs_off(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {"cuda-graph-backend-decode": "disabled", "cuda-graph-backend-prefill": "disabled"}


def _dp_attention(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {"attn-dp-size": int(flags.get("dp-size") or 1), "dp-size": None}


# Booleans deprecated since 0.5.18: the command line still takes them (with a warning), but the --config
# parser of 0.5.23 refuses a DeprecatedStoreTrueAction option outright. Each has a current spelling with the
# same meaning (the one its deprecation warning names). A respelling sets a flag only where the trial did not
# set it itself, and None drops one (dp-size, folded into attn-dp-size).
_RESPELLED = {"disable-cuda-graph": _graphs_off, "enable-dp-attention": _dp_attention}

# Second spellings of the parallel sizes in 0.5.23's parser (tuner/flags/sglang-0.5.23.json, option_strings).
_SIZE_ALIASES = {"tensor-parallel-size": "tp-size", "pipeline-parallel-size": "pp-size",
                 "data-parallel-size": "dp-size", "attention-data-parallel-size": "attn-dp-size"}

# 0.5.23's flags whose resolved value /server_info reports in cuda_graph_config: flag -> (phases, key).
_GRAPH_FLAGS = {
    **{f"cuda-graph-{name}-{phase}": ((phase,), key) for phase in ("decode", "prefill")
       for name, key in (("max-bs", "max_bs"), ("bs", "bs"), ("backend", "backend"))},
    "disable-cuda-graph": (("decode", "prefill"), "backend"),
    "disable-decode-cuda-graph": (("decode",), "backend"),
    "disable-prefill-cuda-graph": (("prefill",), "backend"),
}


class SGLang(Engine):
    def __init__(self) -> None:
        super().__init__(
            name="sglang",
            default_command=(sys.executable, "-m", "sglang.launch_server"),
            # One generation of one token, which sleeps a second before it answers (entrypoints/http_server.py,
            # health_generate). Not /health then /health_generate: SGLang serves both with that one handler,
            # so asking both cost every start a second generation.
            ready_path="/health_generate",
            ready_generates=True,
            fatal_patterns=SGLANG_FATAL,
            gpu_flags=("tp-size", "pp-size", "dp-size"),
            replica_flag="dp-size",
            batch_limit_flag="max-running-requests",
            graph_batch_flags=("cuda-graph-max-bs-decode", "cuda-graph-max-bs"),
            # 0.5.23: "Capture target decode CUDA graph begin. ..." / "... end. ..." (and prefill, draft alike;
            # model_runner_components/cuda_graph_setup.py); 0.5.6: "Capture cuda graph begin. ..." ("cpu graph"
            # on a CPU device). tests/contract/test_log_lines_contract.py renders every such line in the source.
            capture_begin=r"Capture .*(?:cuda|CUDA|cpu) graph begin",
            capture_end=r"Capture .*(?:cuda|CUDA|cpu) graph end",
            display_command=("python", "-m", "sglang.launch_server"),
            # bench_serving opens an aiohttp session, so a TCP connection, per request
            # (sglang/benchmark/serving.py, _create_bench_client_session in each async_request_*). With
            # kept-alive connections the probe measured 0.88x its mean TTFT on the simulated 8B server:
            # the first request of a wave arrived alone and was prefilled alone less often
            # (benchmarks/probe_vs_sglang_bench.py).
            bench_reuses_connections=False,
        )

    def gpus_needed(self, flags: Mapping[str, Any]) -> int:
        # `--dp-size N --enable-dp-attention` puts N attention-DP ranks on the tp GPUs. Otherwise dp-size counts
        # replicas, each on tp x pp GPUs of its own, `--attn-dp-size` or not: SGLang 0.5.23's parser calls the
        # first "Deprecated. Use --attn-dp-size <dp-size> instead of --dp-size <dp-size> --enable-dp-attention"
        # and attn-dp-size "the number of data-parallel attention groups inside the TP group"
        # (tuner/flags/sglang-0.5.23.json, dumped from it; the simulator's resolve() counts GPUs alike).
        flags = {_SIZE_ALIASES.get(k, k): v for k, v in flags.items()}
        if flags.get("enable-dp-attention") and int(flags.get("attn-dp-size") or 1) == 1:
            flags = {k: v for k, v in flags.items() if k != "dp-size"}
        return super().gpus_needed(flags)

    def argv(self, command: Sequence[str], model_path: str, host: str, port: int,
             flags: Mapping[str, Any], api_key: str | None) -> list[str]:
        argv = [*command, "--model-path", model_path, "--host", host, "--port", str(port)]
        if api_key:
            argv += ["--api-key", api_key]
        return argv + flag_argv(flags)

    def server_info(self, client: httpx.Client) -> dict[str, Any]:
        for path in ("/server_info", "/get_server_info"):
            response = client.get(path)
            if response.status_code == 404:
                continue
            response.raise_for_status()
            return response.json()
        return {}

    def effective_flags(self, info: Mapping[str, Any], asked: Mapping[str, Any]) -> dict[str, Any]:
        """Where the server reports them: from 0.5.23 on, the resolved CUDA-graph settings are only in
        `cuda_graph_config` (decode and prefill phases); the flat per-phase flags keep what was asked, so
        64 asked and 32 captured reads 64 there (sglang/srt/arg_groups/cuda_graph_hook.py and
        memory_hook.py write the result into cuda_graph_config; utils/common.py build_server_info
        serves ServerArgs.resolved_dict()). 0.5.6 has no cuda_graph_config and resolves its flat
        `cuda_graph_max_bs` / `cuda_graph_bs` in place (server_args.py, __post_init__)."""
        out = super().effective_flags(info, asked)
        graphs = info.get("cuda_graph_config")
        if not isinstance(graphs, Mapping):
            return out
        for flag in asked:
            if flag in _GRAPH_FLAGS:
                phases, key = _GRAPH_FLAGS[flag]
                values = [(graphs.get(p) or {}).get(key) for p in phases]
                if key == "backend" and flag.startswith("disable-"):
                    out[flag] = all(v == "disabled" for v in values)
                elif values[0] is not None:
                    out[flag] = values[0]
        return out

    def complete(self, client: httpx.Client, prompt: str, max_tokens: int) -> Completion:
        body = {"text": prompt, "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": 0}
        response = client.post("/generate", json=body)
        response.raise_for_status()
        data = response.json()
        meta = data.get("meta_info", {})
        out = meta.get("output_token_logprobs") or []
        prompt_ids = tuple(int(t[1]) for t in meta.get("input_token_logprobs") or [])
        ids = tuple(int(t[1]) for t in out) or tuple(data.get("output_ids") or ())
        return Completion(text=data.get("text", ""), token_ids=ids,
                          logprobs=tuple(finite_or_none(t[0]) for t in out), prompt_ids=prompt_ids)

    def complete_batch(self, client: httpx.Client, prompts: list[str], max_tokens: int) -> list[Completion]:
        # A list of texts is one batch request: the tokenizer manager hands them to the scheduler together.
        body = {"text": list(prompts), "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": 0}
        response = client.post("/generate", json=body)
        response.raise_for_status()
        out = []
        for data in response.json():
            meta = data.get("meta_info", {})
            entries = meta.get("output_token_logprobs") or []
            ids = tuple(int(t[1]) for t in entries) or tuple(data.get("output_ids") or ())
            out.append(Completion(text=data.get("text", ""), token_ids=ids,
                                  logprobs=tuple(finite_or_none(t[0]) for t in entries),
                                  prompt_ids=tuple(int(t[1]) for t in meta.get("input_token_logprobs") or [])))
        return out

    def prefill_logprobs(self, client: httpx.Client, prompt: str, completion: Completion) -> tuple[float | None, ...]:
        # With the prompt in front: the output's first token then has a logprob (the first of a prefill has
        # none, which without the prompt would read as NaN).
        prompt_ids = list(completion.prompt_ids) or prompt_ids_from_server(client, prompt)
        ids = prompt_ids + list(completion.token_ids)
        body = {"input_ids": ids, "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
                "return_logprob": True, "logprob_start_len": 0}
        response = client.post("/generate", json=body)
        response.raise_for_status()
        entries = response.json().get("meta_info", {}).get("input_token_logprobs") or []
        n = len(completion.token_ids)
        check_ids_line_up(ids, [int(t[1]) for t in entries], n)
        return tuple(finite_or_none(t[0]) for t in entries[len(entries) - n:])

    def stream_request(self, prompt: str | list[int], max_tokens: int, logprobs: bool) -> tuple[str, dict]:
        body: dict[str, Any] = {"sampling_params": {"max_new_tokens": max_tokens, "temperature": 0.0,
                                                    "ignore_eos": True},
                                "stream": True}
        body["input_ids" if isinstance(prompt, list) else "text"] = prompt
        if logprobs:
            body["return_logprob"] = True
            body["logprob_start_len"] = -1
        return "/generate", body

    def stream_parser(self) -> _SGLangStream:
        return _SGLangStream()

    def deprecated_in(self, version: str | None) -> frozenset[str]:
        try:
            release = tuple(int(part) for part in (version or "").split(".")[:3])
        except ValueError:
            release = ()
        return frozenset(_RESPELLED) if release >= (0, 5, 18) else frozenset()

    def respell(self, flags: Mapping[str, Any], deprecated: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        out, launch_line = dict(flags), {}
        for name, value in flags.items():
            if name not in deprecated or value in (None, False):
                continue
            del out[name]
            if name not in _RESPELLED:
                launch_line[name] = value
                continue
            for new, new_value in _RESPELLED[name](flags).items():
                if new_value is None:
                    out.pop(new, None)
                elif out.get(new) is None:
                    out[new] = new_value
        return out, launch_line

    def config_spellings(self, flags: Mapping[str, Any], version: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(flags the version's --config takes, each under a key it accepts; flags it takes under no key).

        SGLang 0.5.17's --config merger refuses a key equal to the dest of any action that is neither store
        nor store_true, so `cuda-graph-max-bs-decode: 256` is refused there: the deprecated alias
        --cuda-graph-max-bs stores into that dest (found on a real H100). Its alias spelling is accepted and
        parses to the same value. The merger is judged by tuner/flags/'s model of it (the simulator's too), which
        the contract tests hold to each version's real one."""
        if version not in VERSIONS:
            return dict(flags), {}
        parser = build_parser(version)
        refusing = refused_config_keys(parser, version)

        def taken(key: str) -> bool:
            return key.replace("-", "_") not in refusing

        accepted, refused = {}, {}
        for name, value in flags.items():
            if taken(name):
                accepted[name] = value
                continue
            action = parser._option_string_actions.get(f"--{name}")
            aliases = [o[2:] for a in parser._actions if action is not None and a.dest == action.dest
                       and a is not action and a.nargs == action.nargs for o in a.option_strings if o.startswith("--")]
            alias = next((a for a in aliases if taken(a)), None)
            if alias is None:
                refused[name] = value
            else:
                accepted[alias] = value
        return accepted, refused

    def config_file(self, flags: Mapping[str, Any], model_path: str) -> dict[str, Any]:
        out: dict[str, Any] = {"model-path": model_path}
        for name, value in flags.items():
            if value is None or value is False:
                continue  # SGLang's --config cannot express an absent flag otherwise
            out[name] = list(value) if isinstance(value, (list, tuple)) else value
        return out


_META = b',"meta_info":'
_DECODER = json.JSONDecoder()


class _SGLangStream:
    """SGLang's stream events already carry the totals so far: nothing to remember between them."""

    def decode(self, payload: bytes) -> Any:
        """An event's JSON, without the text and ids of the events before the last.

        Each event repeats the whole text and every output id so far (orjson, compact, keys in the order
        text, output_ids, meta_info: entrypoints/http_server.py stream_results, utils/json_response.py), so
        parsing all of it grows with the square of the length. The probe
        needs only meta_info until the last event (the token count, logprobs, the finish), and the text of
        the last (the content check). Parsing every event whole cost the probe 1.6x bench_serving's CPU per
        token at 256 tokens (benchmarks/probe_vs_sglang_bench.py, instant profile); bench_serving parses
        with orjson. A `,"meta_info":` outside a string is the key itself: a quote inside one is escaped."""
        at = payload.find(_META)
        if at < 0 or not payload.startswith(b'{"text":'):  # an error event, or not the compact shape
            return decode_json(payload)
        meta, _ = _DECODER.raw_decode(payload[at + len(_META):].decode())
        if not isinstance(meta, dict) or meta.get("finish_reason") is not None:
            return decode_json(payload)
        return {"text": "", "meta_info": meta}

    def feed(self, data: Mapping[str, Any]) -> StreamEvent:
        if "error" in data and "text" not in data:
            # Errors found after the response started (context too long, bad sampling parameters): SGLang
            # answers HTTP 200, then this event, then [DONE] (entrypoints/http_server.py, stream_results).
            error = data["error"]
            message = error.get("message") if isinstance(error, Mapping) else error
            raise StreamErrorEvent(f"stream error: {message}"[:300])
        meta = data.get("meta_info") or {}
        finish = meta.get("finish_reason")
        if isinstance(finish, Mapping) and finish.get("type") == "abort":
            raise StreamErrorEvent(f"request aborted by the server: {finish.get('message') or finish}"[:300])
        lps = tuple(finite_or_none(t[0]) for t in meta.get("output_token_logprobs") or ())
        return StreamEvent(text=data.get("text", ""), completion_tokens=meta.get("completion_tokens"),
                           logprobs=lps, finished=finish is not None, prompt_tokens=meta.get("prompt_tokens"),
                           cached_tokens=meta.get("cached_tokens"))
