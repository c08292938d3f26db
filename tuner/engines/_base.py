"""What the trial pipeline needs to know about an inference engine, in one place per engine.

The pipeline never mentions an engine by name: launching, readiness, reading effective arguments
back, fatal log lines, the requests of the gate and the probe, and the exported config all go
through an :class:`Engine`. Adding an engine means adding one module here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from .._failures import FailureKind


class StreamErrorEvent(httpx.HTTPError):
    """The server ended a stream with an error instead of output (HTTP 200, then `data: {"error": ...}`, or an
    aborted request): the request failed. An httpx.HTTPError, so the probe counts it as a failed request."""


class CheckSkipped(Exception):
    """A gate check that this server's answers do not allow (ids it cannot give, or that do not line up):
    the reason is recorded and the trial goes on; nothing is concluded about the configuration."""


@dataclass(frozen=True)
class Completion:
    """One greedy completion, as the gate sees it."""

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[float | None, ...]  # of each output token; None where the server sent null
    prompt_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class StreamEvent:
    """What one streamed chunk added."""

    text: str  # the text so far
    completion_tokens: int | None  # tokens so far, where the engine says
    logprobs: tuple[float | None, ...] = ()
    finished: bool = False
    prompt_tokens: int | None = None
    cached_tokens: int | None = None  # prompt tokens the prefix cache served, where the engine says (SGLang)


class StreamParser(Protocol):
    def decode(self, payload: bytes) -> Any: ...  # one `data:` payload's JSON, as much as `feed` needs
    def feed(self, data: Mapping[str, Any]) -> StreamEvent: ...


def decode_json(payload: bytes) -> Any:
    return json.loads(payload.decode())  # str first: json then skips guessing the encoding


@dataclass(frozen=True)
class FatalPattern:
    regex: re.Pattern[str]
    kind: FailureKind
    # False for signs a live server also prints for one failed request (a bare traceback): they explain an
    # exit but end no trial on their own (tuner/trial/_logwatch.py).
    definitive: bool = True


@dataclass
class Engine:
    name: str
    default_command: tuple[str, ...]
    ready_path: str
    # True: `ready_path` answers only after a real generation (SGLang's /health_generate), so it is asked with
    # the first request's timeout while the process and its log are watched. SGLang's /health can answer
    # before its scheduler has served anything (sglang-jax, SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0), and a
    # scheduler can die on the first request after the log says "ready".
    ready_generates: bool = False
    fatal_patterns: Sequence[FatalPattern] = field(default_factory=tuple)
    # Flags whose values say how many GPUs a server uses (product, each defaulting to 1).
    gpu_flags: tuple[str, ...] = ()
    # The flag that runs more replicas of the same server on more GPUs (data parallel), if the engine has one.
    replica_flag: str | None = None
    # The flag that caps how many requests the server (each replica) runs at once, if the engine has one.
    batch_limit_flag: str | None = None
    # The flags that set the largest decode batch run with a CUDA graph (a larger batch runs without), if any.
    graph_batch_flags: tuple[str, ...] = ()
    # The log lines that open and close CUDA graph capture (regexes), if the engine captures graphs: a start
    # that hangs between them hung capturing, which only a configuration that captures graphs can do.
    capture_begin: str | None = None
    capture_end: str | None = None
    display_command: tuple[str, ...] = ()  # how a person launches it, for exported commands
    model_flag: str = "--model-path"
    # Whether the engine's own benchmark client keeps connections alive between requests; the probe
    # connects as it does, since a new connection's wait at a busy server's accept is part of its TTFT.
    bench_reuses_connections: bool = True
    _any_fatal: re.Pattern[str] | None = field(default=None, init=False, repr=False)

    # -- launching ---------------------------------------------------------------------------------
    def argv(self, command: Sequence[str], model_path: str, host: str, port: int,
             flags: Mapping[str, Any], api_key: str | None) -> list[str]:
        raise NotImplementedError

    def gpus_needed(self, flags: Mapping[str, Any]) -> int:
        n = 1
        for flag in self.gpu_flags:
            value = flags.get(flag)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                n *= value
        return n

    def classify_log_line(self, line: str) -> tuple[FailureKind, bool] | None:
        """(kind, definitive) of the first pattern the line matches."""
        if self._any_fatal is None:
            # One pass of a combined pattern first: almost no line matches, and a burst has millions.
            self._any_fatal = re.compile("|".join(f"(?:{p.regex.pattern})" for p in self.fatal_patterns) or "$^")
        if not self._any_fatal.search(line):
            return None
        for pattern in self.fatal_patterns:
            if pattern.regex.search(line):
                return pattern.kind, pattern.definitive
        return None

    # -- after start ---------------------------------------------------------------------------------
    def server_info(self, client: httpx.Client) -> dict[str, Any]:
        """The effective arguments and version, as the server reports them."""
        raise NotImplementedError

    def effective_flags(self, info: Mapping[str, Any], asked: Mapping[str, Any]) -> dict[str, Any]:
        """For each flag asked for, the value the server says it uses (absent where it does not say)."""
        out = {}
        for flag in asked:
            key = flag.replace("-", "_")
            if info.get(key) is not None:  # None: the server does not say (sglang-jax's max_running_requests)
                out[flag] = info[key]
        return out

    def version(self, info: Mapping[str, Any]) -> str | None:
        return info.get("version")

    # -- gate and probe ----------------------------------------------------------------------------
    def complete(self, client: httpx.Client, prompt: str, max_tokens: int) -> Completion:
        raise NotImplementedError

    def complete_batch(self, client: httpx.Client, prompts: list[str], max_tokens: int) -> list[Completion]:
        """Greedy completions of `prompts`, sent as one request so that the server schedules them together (one
        decode batch); in the order given."""
        raise NotImplementedError

    def prefill_logprobs(self, client: httpx.Client, prompt: str, completion: Completion) -> tuple[float | None, ...]:
        """Logprobs of the completion's tokens when prompt + completion is prefilled at once."""
        raise NotImplementedError

    def stream_request(self, prompt: str | list[int], max_tokens: int, logprobs: bool) -> tuple[str, dict]:
        raise NotImplementedError

    def stream_parser(self) -> StreamParser:
        """A parser for one streamed response: it turns each `data:` object into the totals so far."""
        raise NotImplementedError

    # -- export ------------------------------------------------------------------------------------
    def config_spellings(self, flags: Mapping[str, Any], version: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(flags under the keys the server version's --config takes, flags it takes under no key)."""
        return dict(flags), {}

    def config_file(self, flags: Mapping[str, Any], model_path: str) -> dict[str, Any]:
        """The engine's --config YAML mapping for these flags."""
        raise NotImplementedError

    def deprecated_in(self, version: str | None) -> frozenset[str]:
        """Deprecated flags of this server version, for a study that did not record its server's --help."""
        return frozenset()

    def respell(self, flags: Mapping[str, Any], deprecated: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The flags as a --config file takes them (deprecated ones in their current spelling, where the
        version has one), and those that must stay on the launch line (deprecated, with no other spelling)."""
        return dict(flags), {}


def flag_argv(flags: Mapping[str, Any]) -> list[str]:
    """SGLang/vLLM CLI spelling: `--name value`, a bare flag for true, nothing for false/None."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is None or value is False:
            continue
        if value is True:
            argv.append(f"--{name}")
        elif isinstance(value, (list, tuple)):
            if value:
                argv += [f"--{name}", *map(str, value)]
        else:
            argv += [f"--{name}", str(value)]
    return argv


def patterns(*rules: tuple[str, FailureKind] | tuple[str, FailureKind, bool]) -> tuple[FatalPattern, ...]:
    """(regex, kind) or (regex, kind, definitive) rules."""
    return tuple(FatalPattern(re.compile(rule[0]), *rule[1:]) for rule in rules)


def finite_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if v == v and v not in (float("inf"), float("-inf")) else None


def prompt_ids_from_server(client: httpx.Client, prompt: str) -> list[int]:
    """The prompt's token ids from the server's own tokenizer: `POST /tokenize` (SGLang and vLLM)."""
    response = client.post("/tokenize", json={"prompt": prompt})
    if response.status_code in (400, 404, 405, 422):
        raise CheckSkipped(f"the answer carried no prompt token ids and /tokenize answered HTTP "
                           f"{response.status_code}")
    response.raise_for_status()
    tokens = response.json().get("tokens")
    if not tokens or not all(isinstance(t, int) for t in tokens):
        raise CheckSkipped("the answer carried no prompt token ids and /tokenize gave none")
    return tokens


def check_ids_line_up(asked: list[int], got: list[int], n: int) -> None:
    """The re-prefill must report logprobs for exactly the ids it was asked about (its last `n`)."""
    if len(got) < n or got[len(got) - n:] != asked[len(asked) - n:] or (len(got) == len(asked) and got != asked):
        raise CheckSkipped(f"the re-prefill reported ids {got[-n:][:8]}..., not the completion's "
                           f"{asked[-n:][:8]}...: its logprobs cannot be compared")
