"""The search: the study and its storage, the crash-aware TPE sampler and the pruner, the workers that run trials
(on GPU slots), and what a study learns from earlier ones (its context, knowledge and warm start)."""

from __future__ import annotations

from ._context import ATTR as CONTEXT_ATTR, ContextRecorder, describe as describe_context, describe_gpus
from ._gpus import GpuProbe, MemoryBaseline, check_gpu_ids, parse_gpu_list
from ._lessons import Blamed, Lesson, blame_failures
from ._learn import (ATTR as LEARNED_ATTR, Learning, best_context, describe as describe_learning, export_knowledge,
                     gather, line as learn_line, record as record_learning, stored_context, study_exists)
from ._slots import SlotPool
from ._study import SAMPLERS, heartbeat_settings, load_or_create, load_study, open_storage, stored_study_names
from ._warm import (DEFAULT_PARTS, MEASURED as CARRY_MEASURED, PARTS as CARRY_PARTS, WarmStart, parse_parts,
                    warm_start)
from ._worker import (REMEASURE_ATTR, Interrupted, NotStarted, Surplus, TrialBudget, Worker, fail_trials_of_dead_workers,
                      reference_gap)

__all__ = ["CARRY_MEASURED", "CARRY_PARTS", "DEFAULT_PARTS", "parse_parts", "REMEASURE_ATTR", "reference_gap", "CONTEXT_ATTR", "LEARNED_ATTR", "SAMPLERS", "ContextRecorder", "GpuProbe", "Interrupted", "Learning",
           "Blamed", "Lesson", "blame_failures",
           "MemoryBaseline", "NotStarted", "SlotPool", "Surplus", "TrialBudget", "WarmStart", "Worker", "best_context",
           "check_gpu_ids", "describe_context", "describe_gpus", "describe_learning", "export_knowledge",
           "fail_trials_of_dead_workers", "gather", "heartbeat_settings", "learn_line", "load_or_create", "load_study", "open_storage",
           "parse_gpu_list", "record_learning", "stored_context", "stored_study_names", "study_exists", "warm_start"]
