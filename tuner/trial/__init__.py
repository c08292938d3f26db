"""One trial, stage by stage: launch the server, wait until it is ready, gate its answers, probe its throughput,
record what happened and stop it with nothing left running (`run_trial` strings the stages, tuner/trial/_trial.py).
"""

from __future__ import annotations

from ._probe import PROGRESS_EVERY
from ._procs import free_port, port_is_free
from ._ratesearch import RATE_STEPS, slo_text
from ._record import FEASIBILITY, note_markdown, save_note, store_log, trial_attrs, upload_log
from ._teardown import WORKER_RECORD, end_orphans, owner_alive, read_record, this_worker, write_record
from ._tokens import LENGTHS_ATTR, PromptTokens, lengths_attr, model_tokens, words_note
from ._trial import TrialContext, TrialPlan, TrialResult, run_trial

__all__ = ["FEASIBILITY", "LENGTHS_ATTR", "PROGRESS_EVERY", "RATE_STEPS", "WORKER_RECORD", "PromptTokens",
           "TrialContext", "TrialPlan", "TrialResult", "end_orphans", "free_port", "lengths_attr", "model_tokens",
           "note_markdown", "owner_alive", "port_is_free", "read_record", "run_trial", "save_note", "slo_text",
           "store_log", "this_worker", "trial_attrs", "upload_log", "words_note", "write_record"]
