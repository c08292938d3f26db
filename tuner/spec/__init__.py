"""The space file a user writes, read and checked: the server, the search space, the baseline, the gate, the probe
and the objective. Everything below it (a trial, a study) takes a `Spec`; it imports nothing of theirs."""

from __future__ import annotations

from ._datasets import WorkItem, load_rows
from ._schema import did_you_mean
from ._space import Param, ServerConfig, Space
from ._space_text import rewrite
from ._spec import GateSpec, ProbeSpec, RateSearchSpec, SharedPrefix, Spec, TraceSpec, load_spec, parse_spec
from ._traces import MOONCAKE_BLOCK, TraceRow, load_trace, loop_trace, mean_rate

__all__ = ["MOONCAKE_BLOCK", "GateSpec", "Param", "ProbeSpec", "RateSearchSpec", "ServerConfig", "SharedPrefix",
           "Space", "Spec", "TraceRow", "TraceSpec", "WorkItem", "did_you_mean", "load_rows", "load_spec",
           "load_trace", "loop_trace", "mean_rate", "parse_spec", "rewrite"]
