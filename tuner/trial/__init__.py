"""One trial, stage by stage: launch the server, wait until it is ready, gate its answers, probe its throughput,
record what happened and stop it with nothing left running (`run_trial` strings the stages, tuner/trial/_trial.py).
"""

from __future__ import annotations

from ._probe import CUT_LEVEL_ATTR, PROGRESS_EVERY, TIME_BUDGET_ATTR, cut_message
from ._logwatch import LogWatcher
from ._procs import free_port, port_is_free
from ._ratesearch import RATE_STEPS, slo_text
from ._record import FEASIBILITY, note_markdown, save_note, store_log, trial_attrs, upload_log
from ._teardown import WORKER_RECORD, end_orphans, owner_alive, read_record, this_worker, write_record
from ._tokens import LENGTHS_ATTR, PromptTokens, lengths_attr, model_tokens, words_note
from ._trial import TrialContext, TrialPlan, TrialResult, run_trial

__all__ = ["CUT_LEVEL_ATTR", "FEASIBILITY", "LENGTHS_ATTR", "LogWatcher", "PROGRESS_EVERY", "PromptTokens",
           "RATE_STEPS", "TIME_BUDGET_ATTR", "TrialContext", "TrialPlan", "TrialResult", "WORKER_RECORD",
           "cut_message", "end_orphans", "free_port", "lengths_attr", "model_tokens", "note_markdown", "owner_alive",
           "port_is_free", "read_record", "run_trial", "save_note", "slo_text", "store_log", "this_worker",
           "trial_attrs", "upload_log", "words_note", "write_record"]
