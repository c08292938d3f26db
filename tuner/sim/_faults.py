"""Fault switches: TUNER_SIM_FAULTS="name,name=value,..." on top of the profile's `faults:` mapping.

Durations here are wall-clock seconds (not scaled by the time scale), so a test can aim at a real timeout.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping


@dataclass(frozen=True)
class Faults:
    ignore_sigterm: bool = False
    child_holds_port: bool = False
    escape_session: bool = False  # a child calls setsid() and keeps the listening port: outside the group
    stop_answering_after: int | None = None
    http_500_rate: float = 0.0
    slow_start_no_log: float = 0.0
    crash_at_start: bool = False
    crash_after_requests: int | None = None
    hang_at_capture: bool = False
    oom_at_capture: bool = False
    oom_at_capture_over: int | None = None  # OOM at capture when the largest captured batch size exceeds this
    nan_when_batch_over: int | None = None
    response_delay: float = 0.0
    # A live server's per-request tracebacks: for each stream the client closes early and each HTTP 500.
    request_tracebacks: bool = False
    log_burst: float = 0.0  # MB of log lines written at once at the first generate request
    no_input_logprobs: bool = False  # /generate of a text prompt omits input_token_logprobs (prompt ids)
    no_tokenize: bool = False  # /tokenize answers 404, as in servers without it
    slow_drip: float = 0.0  # seconds added to each decode step of streamed requests: one token per that time
    stream_error_rate: float = 0.0  # share of streamed requests that end with an error event after a token
    generate_hang: bool = False  # /generate and the OpenAI routes never answer; /health still does
    # Seconds of warm-up after the HTTP server is up, silent (a first-use compile): /health and /health_generate
    # answer 503 meanwhile, as SGLang's do until its warm-up request is done (47 s of them seen on an H100).
    warmup_503: float = 0.0
    slow_exit: float = 0.0  # seconds from SIGTERM (its shutdown lines logged at once) to the exit
    # A sequence's answer depends on its batch: decoded in a batch of at least this many sequences, its logits
    # are another context's (a kernel chosen by batch size, or a CUDA graph captured wrong). Alone it is right.
    batch_slot_error: int | None = None
    # KV written past the first chunk of a chunked prefill is corrupt: the decode after a prompt longer than
    # chunked-prefill-size reads another context. A prefill computes its logprobs right (the gate's re-prefill).
    chunk_kv_error: bool = False


_KINDS = {f.name: f.type for f in fields(Faults)}


def _coerce(name: str, value: Any) -> Any:
    kind = _KINDS[name]
    if "bool" in kind:
        if isinstance(value, str):
            return value.strip().lower() not in ("0", "false", "no", "off", "")
        return bool(value)
    if "int" in kind:
        return int(value)
    return float(value)


def parse_faults(text: str | None, base: Mapping[str, Any] | None = None) -> Faults:
    values: dict[str, Any] = {}
    for name, value in (base or {}).items():
        if name not in _KINDS:
            raise ValueError(f"unknown fault {name!r} in profile (known: {', '.join(_KINDS)})")
        values[name] = _coerce(name, value)
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if name not in _KINDS:
            raise ValueError(f"unknown fault {name!r} in TUNER_SIM_FAULTS (known: {', '.join(_KINDS)})")
        values[name] = _coerce(name, value.strip() if sep else True)
    return Faults(**values)


# The faults that scripts/sglang_faults plants in real SGLang (named by TUNER_FAULT, per trial), as the simulator's
# health: a dry run of a faults space fails the same trials the same way.
PLANTED = {
    "none": {},
    "nan-decode-batch8": {"nan_when_batch_over": 7},
    "decode-position": {"decode_position_error": True},
    "chunk-kv": {"chunk_kv_error": True},
    "batch-slot": {"batch_slot_error": 4},
}


def planted_health(name: str | None) -> dict[str, Any]:
    """Health fields for a TUNER_FAULT name (nothing without one); ValueError names the known faults."""
    if not name:
        return {}
    if name not in PLANTED:
        raise ValueError(f"unknown fault {name!r} in TUNER_FAULT (known: {', '.join(PLANTED)})")
    return dict(PLANTED[name])
