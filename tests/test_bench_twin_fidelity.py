"""benchmarks/twin_fidelity.py on the real study in docs/gpu-sglang-0517/ with the H100 twin: its rows are the
study's trials, its figures follow from its rows, and the study's file is left as it was.

No outcome is pinned here: the figures are the benchmark's to print. What is checked is that they are
consistent: every trial of a range has its row, an error is what the two throughputs say, the medians and
Spearman's rho are in range, and the failure kinds counted are the rows' kinds.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DB = REPO / "docs" / "gpu-sglang-0517" / "trials.db"
PROFILE = "sglang-0.5.17-h100-llama3-8b"
ROW = re.compile(r"^\s*(\d+)  (.*)$")


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / "twin_fidelity.py"), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def _sections(out: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("== "):
            current = line.strip("= ").split(":")[0]
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return sections


@pytest.fixture(scope="module")
def trials(tmp_path_factory) -> dict[int, tuple[str, int | None]]:
    """number -> (state, last step reported to the pruner), read from a copy (SQLite writes beside a WAL
    database even to read it)."""
    copy = tmp_path_factory.mktemp("db") / "trials.db"
    shutil.copyfile(DB, copy)
    with contextlib.closing(sqlite3.connect(copy)) as db:
        states = dict(db.execute("SELECT number, state FROM trials"))
        steps = dict(db.execute("SELECT t.number, MAX(v.step) FROM trials t JOIN trial_intermediate_values v "
                                "ON v.trial_id = t.trial_id GROUP BY t.number"))
    return {n: (state, steps.get(n)) for n, state in states.items()}


def _check_section(lines: list[str], numbers: set[int], trials: dict[int, tuple[str, int | None]]) -> None:
    rows = {int(m.group(1)): m.group(2) for line in lines if (m := ROW.match(line))}
    assert set(rows) == numbers  # one row per trial of the range, no other
    kinds: dict[str, int] = {}
    for number, rest in rows.items():
        state, step = trials[number]
        if rest.startswith("not compared:"):
            continue
        fields = rest.split()
        real = fields[0].rstrip("*")
        if fields[0].endswith("*"):  # re-read: a footnote says from what
            assert any(line.strip().startswith(f"* trial {number}: recorded as ") for line in lines)
        if state == "COMPLETE":
            assert real == "ok", rest
        elif real == "pruned":
            assert state == "PRUNED" and fields[1] == f"@{step}", rest
        else:
            assert state in ("PRUNED", "FAIL"), rest
            kinds[real] = kinds.get(real, 0) + 1
        numbers_in_row = re.findall(r"\s(-|\d+\.\d)\s+(\S+(?: at \S+)?(?: \(differs\))?)\s+(-|\d+\.\d)\s+(-|[+-]\d+\.\d%)\s", rest)
        assert numbers_in_row, rest
        real_tok, _, twin_tok, error = numbers_in_row[0]
        if error != "-":
            expected = (float(twin_tok) - float(real_tok)) / float(real_tok) * 100
            assert float(error.rstrip("%")) == pytest.approx(expected, abs=0.11), rest
    text = "\n".join(lines)
    completed = re.search(r"completed trials: n=(\d+), Spearman rho (n/a|-?\d\.\d\d).*median \|error\| (n/a|[\d.]+%), "
                          r"worst (n/a|[\d.]+%)", text)
    assert completed, text
    rho = completed.group(2)
    assert rho == "n/a" or -1.0 <= float(rho) <= 1.0
    if completed.group(3) != "n/a":
        assert 0 <= float(completed.group(3).rstrip("%")) <= float(completed.group(4).rstrip("%"))
    assert int(completed.group(1)) == sum(1 for r in rows.values() if r.startswith("ok ") and "%" in r)
    caught = re.search(r"real failure kinds predicted: (.*?);", text).group(1)
    counted = {k: int(n) for k, _, n in re.findall(r"(\w+) (\d+)/(\d+)", caught)}
    assert counted == kinds
    assert re.search(r"^verdict: rho >= 0\.8: .*; median \|error\| <= 15%: .*; every real failure kind predicted: ",
                     text, re.M)


def test_in_sample_and_held_out_rows_match_the_study_and_leave_it_alone(trials):
    before = hashlib.sha256(DB.read_bytes()).hexdigest()
    files = sorted(DB.parent.iterdir())
    done = _run("--db", str(DB), "--profile", PROFILE, "--calibration", "0-6", "--held-out", "7-")
    assert done.returncode == 0, done.stderr
    sections = _sections(done.stdout)
    calibration = next(lines for name, lines in sections.items() if name.startswith("calibration set"))
    held_out = next(lines for name, lines in sections.items() if name.startswith("held-out set"))
    _check_section(calibration, {n for n in trials if n <= 6}, trials)
    _check_section(held_out, {n for n in trials if n >= 7}, trials)
    # Trial 27 was recorded ok, its probe cut before a request finished: no measurement to judge the twin by.
    assert any(re.match(r"\s*27  not compared: probe cut at its time budget", line) for line in held_out), held_out
    assert hashlib.sha256(DB.read_bytes()).hexdigest() == before and sorted(DB.parent.iterdir()) == files


def test_by_default_the_twin_s_calibration_set_comes_first_then_the_held_out_trials(trials):
    """The H100 twin was calibrated on trials 0-29; 30 and up are held out (none may have run yet)."""
    done = _run("--db", str(DB), "--profile", PROFILE)
    assert done.returncode == 0, done.stderr
    sections = _sections(done.stdout)
    assert list(sections) == ["calibration set, in-sample", "held-out set"]
    _check_section(sections["calibration set, in-sample"], {n for n in trials if n <= 29}, trials)
    later = {n for n in trials if n >= 30}
    if later:
        _check_section(sections["held-out set"], later, trials)
    else:
        assert "no trial of the study is in this range yet" in "\n".join(sections["held-out set"])


def test_a_range_with_no_trial_yet_says_so():
    done = _run("--db", str(DB), "--profile", PROFILE, "--held-out", "1000-")
    assert done.returncode == 0, done.stderr
    assert "no trial of the study is in this range yet" in done.stdout


@pytest.mark.parametrize("args, named", [
    (("--db", "no/such/trials.db", "--profile", PROFILE), "no such file"),
    (("--db", str(DB), "--profile", "no-such-profile"), "no simulation profile 'no-such-profile'"),
    (("--db", str(DB), "--profile", PROFILE, "--held-out", "9-3"), "an empty range"),
    (("--db", str(DB), "--profile", PROFILE, "--calibration", "zero-ten"), "not a trial range"),
    (("--db", str(REPO / "README.md"), "--profile", PROFILE), "not an Optuna study database"),
])
def test_bad_input_is_one_line_and_exit_2(args, named):
    done = _run(*args)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and named in done.stderr, done.stderr


def test_a_study_of_another_objective_or_without_its_space_is_refused(tmp_path):
    import optuna

    space = (REPO / "search_spaces" / f"{PROFILE}.yaml").read_text()
    other = tmp_path / "other.db"
    study = optuna.create_study(study_name="other", storage=f"sqlite:///{other}", direction="maximize")
    study.set_user_attr("space_source", space.replace("metric: output_throughput", "metric: total_throughput"))
    bare = tmp_path / "bare.db"
    optuna.create_study(study_name="bare", storage=f"sqlite:///{bare}")
    for db, named in ((other, "maximises total_throughput; the twin predicts output_throughput"),
                      (bare, "keeps no space")):
        done = _run("--db", str(db), "--profile", PROFILE)
        assert done.returncode == 2 and done.stdout == "" and named in done.stderr, done.stderr
