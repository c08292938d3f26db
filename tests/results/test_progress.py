"""The run's progress lines fit the terminal: the message gives way, never the counts."""

from __future__ import annotations

import re

from conftest import FAULT_SPACE

from tuner.results._progress import MESSAGE_WIDTH, progress_line

TRIAL_LINE = re.compile(r"^\[(\d+)/(\d+)\] trial +(\d+) ")


def test_progress_lines_fit_columns_and_keep_their_counts(tuner):
    """Each line used to be 161-184 columns whatever the terminal, so each wrapped in a 120-column pane."""
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "crash_at_start", "COLUMNS": "100"})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if TRIAL_LINE.match(line)]
    assert [TRIAL_LINE.match(line).groups() for line in lines] == [("1", "2", "0"), ("2", "2", "1")]
    full = tuner.study("faults").trials[0].user_attrs["failure_message"]
    for line in lines:
        assert len(line) < 100, line
        assert " crash_on_start " in line and re.search(r"\d+\.\ds  best -  \d+s elapsed", line), line
        shown = line.split(" crash_on_start ", 1)[1].strip().split("  ")[0]
        assert len(shown) > 10 and len(shown) < len(full), (shown, full)
        assert full.startswith(shown.removesuffix("...").removesuffix(" ")), (shown, full)


def test_a_narrow_terminal_takes_the_padding_before_the_message():
    tail = "    1.2s  best 1234.5 (trial 0)  1m02s elapsed, ~3m left"
    message = "RuntimeError: the triton attention kernel for this head size requires SM100 (Blackwell)"
    wide = progress_line("[ 3/40]", 12, "", "nan", message, tail, None)
    assert len(wide) > 160 and message[:MESSAGE_WIDTH - 4] in wide  # no terminal: nothing wraps, as before
    for columns in (200, 160, 120, 100):
        line = progress_line("[ 3/40]", 12, "", "nan", message, tail, columns)
        assert len(line) < columns and line.startswith("[ 3/40] trial ") and line.endswith(tail), line
    aligned = progress_line("[ 3/40]", 12, "", "nan", message, tail, 160)
    assert aligned.index(tail) == progress_line("[ 3/40]", 9, "baseline", "ok", "x", tail, 160).index(tail)
    narrow = progress_line("[ 3/40]", 12, "", "nan", message, tail, 100)
    assert narrow.startswith("[ 3/40] trial 12 nan RuntimeError: the ...")
