"""A study read back for a person: the live progress of a run, and the commands that read a finished study (show,
export, confirm, report, dashboard), with which storage and study they act on."""

from __future__ import annotations

from ._confirm import confirm
from ._dashboard import serve
from ._export import export
from ._last_run import write_last_run
from ._progress import Progress, summary
from ._report import report
from ._show import show
from ._which_study import DEFAULT_STORAGE, Target, choose, target_args

__all__ = ["DEFAULT_STORAGE", "Progress", "Target", "choose", "confirm", "export", "report", "serve", "show",
           "summary", "target_args", "write_last_run"]
