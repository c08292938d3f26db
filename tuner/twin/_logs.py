"""What a real SGLang server log says about one start: memory, start-up timings, graph captures, forward times.

The lines read are SGLang 0.5.x's (tp 1): "Load weight end", "KV Cache is allocated", "Memory pool end",
"Capture ... CUDA graph begin/end", "Engine startup timings (s)", "Prefill batch" and "Decode batch".
"""

from __future__ import annotations

import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

TRIAL_LOG = re.compile(r"(?:^|/)trial-(\d+)/server\.log$")
_NUM = r"([0-9.]+)"
WEIGHTS = re.compile(rf"Load weight end\..*mem usage={_NUM} GB")
KV_TOKENS = re.compile(r"KV Cache is allocated\..*#tokens: (\d+)")
POOL_END = re.compile(rf"Memory pool end\. avail mem={_NUM} GB")
CAPTURE_BEGIN = re.compile(r"Capture target (prefill|decode) CUDA graph begin\..*?(?:num_tokens|bs)=\[([0-9, ]*)\]")
CAPTURE_END = re.compile(rf"Capture target (prefill|decode) CUDA graph end\. elapsed={_NUM} s, mem usage={_NUM} GB, "
                         rf"avail mem={_NUM} GB")
TIMINGS = re.compile(r"Engine startup timings \(s\): (.*)$")
PREFILL = re.compile(rf"Prefill batch, #new-seq: (\d+), #new-token: (\d+), .*#running-req: (\d+), .*"
                     rf"cuda graph: (True|False), input throughput \(token/s\): {_NUM}")
DECODE = re.compile(rf"Decode batch, #running-req: (\d+), #token: (\d+), .*cuda graph: (True|False), "
                    rf"gen throughput \(token/s\): {_NUM}")
DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default: a "Decode batch" line every 40 steps


class LogsError(ValueError):
    pass


@dataclass(frozen=True)
class Capture:
    sizes: tuple[int, ...]  # batch sizes (decode) or token counts (prefill)
    seconds: float
    mem_gb: float  # "mem usage" of the capture
    avail_before_gb: float  # free before it began
    avail_after_gb: float


@dataclass(frozen=True)
class Step:
    """A stretch between two log lines of the same kind that held nothing else."""
    batch: int  # running requests (decode) or new tokens (prefill)
    seqs: int  # prefill: new sequences; decode: the batch
    ctx: int  # decode: KV tokens in use at the line
    graph: bool
    seconds: float  # one forward


@dataclass
class ServerLog:
    weights_gb: float | None = None
    kv_tokens: int | None = None
    pool_avail_gb: float | None = None
    captures: dict[str, Capture] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # load_weight, kv_cache_allocation, prefill, decode
    decode: list[Step] = field(default_factory=list)
    prefill: list[Step] = field(default_factory=list)


def read_logs(path: Path) -> dict[int, ServerLog]:
    """Trial number -> its parsed server log, from a .tar.gz as the tuner's runs/ folder packs them, or a folder."""
    if not path.exists():
        raise LogsError(f"--logs {path}: no such file or folder; give the server logs of the study "
                        "(a runs/ folder or its .tar.gz, e.g. docs/gpu-sglang-0517/server-logs.tar.gz)")
    texts: dict[int, str] = {}
    if path.is_dir():
        for log in path.rglob("server.log"):
            if m := TRIAL_LOG.search(log.as_posix()):
                texts[int(m.group(1))] = log.read_text(errors="replace")
    else:
        try:
            with tarfile.open(path) as tar:
                for member in tar.getmembers():
                    if member.isfile() and (m := TRIAL_LOG.search(member.name)):
                        texts[int(m.group(1))] = tar.extractfile(member).read().decode(errors="replace")
        except (tarfile.TarError, OSError) as exc:
            raise LogsError(f"--logs {path}: not a tar archive ({exc}); give a runs/ folder or its .tar.gz") from None
    if not texts:
        raise LogsError(f"--logs {path}: holds no trial-N/server.log; give the study's runs/ folder or its .tar.gz")
    return {n: parse_log(text) for n, text in texts.items()}


def parse_log(text: str) -> ServerLog:
    log = ServerLog()
    begun: dict[str, tuple[tuple[int, ...], float | None]] = {}
    avail = None
    last_prefill: tuple[int, int, bool] | None = None  # (new tokens, seqs, graph) of the previous prefill line
    last_decode: tuple[int, int] | None = None  # (running, KV tokens) of the previous decode line
    for line in text.splitlines():
        if m := WEIGHTS.search(line):
            log.weights_gb = float(m.group(1))
        elif m := KV_TOKENS.search(line):
            log.kv_tokens = int(m.group(1))
        elif m := POOL_END.search(line):
            log.pool_avail_gb = avail = float(m.group(1))
        elif m := CAPTURE_BEGIN.search(line):
            sizes = tuple(int(s) for s in m.group(2).split(",") if s.strip())
            begun[m.group(1)] = (sizes, avail)
        elif m := CAPTURE_END.search(line):
            kind = m.group(1)
            sizes, before = begun.get(kind, ((), None))
            after = float(m.group(4))
            log.captures[kind] = Capture(sizes, float(m.group(2)), float(m.group(3)),
                                         before if before is not None else after + float(m.group(3)), after)
            avail = after
        elif m := TIMINGS.search(line):
            log.timings = _timings(m.group(1))
        elif m := PREFILL.search(line):
            seqs, tokens, _, graph, rate = int(m.group(1)), int(m.group(2)), m.group(3), m.group(4), float(m.group(5))
            # The rate on a line is the previous prefill's tokens over the time since that line: a forward's
            # time only where nothing ran between the two (no decode line, hence back-to-back chunks).
            if last_prefill is not None and rate > 0:
                log.prefill.append(Step(last_prefill[0], last_prefill[1], 0, last_prefill[2], last_prefill[0] / rate))
            last_prefill = (tokens, seqs, graph == "True")
            last_decode = None
        elif m := DECODE.search(line):
            running, ctx, graph, rate = int(m.group(1)), int(m.group(2)), m.group(3) == "True", float(m.group(4))
            # A whole interval of decode steps at one batch: the context grew by a token a request a step.
            if (last_decode is not None and last_decode[0] == running and rate > 0
                    and ctx - last_decode[1] == running * DECODE_LOG_INTERVAL):
                log.decode.append(Step(running, running, ctx - running * DECODE_LOG_INTERVAL // 2, graph,
                                       running / rate))
            last_decode = (running, ctx)
            last_prefill = None
    return log


def _timings(text: str) -> dict[str, float]:
    """'load_weight=2.34, kv_cache_allocation=0.02, ..., cuda_graph={prefill=19.91, decode=4.62, ...}'."""
    out = {}
    for key, value in re.findall(r"(\w+)=([0-9.]+)", text):
        out[key] = float(value)
    return out
