"""Every command acts on the study the person means (issue 35): the next steps a run prints name its storage, the
commands that read follow the last run in the folder and say so, and a storage without a study is refused with
nothing created. Real tuner processes, simulated servers, SQLite files."""

from __future__ import annotations

import json
import re
import shlex

import optuna
import pytest
import yaml

from conftest import FAULT_SPACE, Tuner

OTHER_SPACE = FAULT_SPACE.replace("name: faults", "name: other")
SIM = ("--simulate", "instant")
READERS = ("show", "export", "confirm", "report", "dashboard")


def _steps(stderr: str) -> list[list[str]]:
    """The run's "next:" commands, as argv (each line's comment cut)."""
    lines = stderr[stderr.rindex("next:"):].splitlines()[1:]
    return [shlex.split(line.split("   # ")[0]) for line in lines if line.startswith("  ")]


def _tuner_argv(step: list[str]) -> list[str]:
    assert step[:3] == ["python", "-m", "tuner"], step
    return step[3:]


@pytest.fixture(scope="module")
def two_storages(tmp_path_factory):
    """One folder, the same person: study 'faults' in the default trials.db (trial 0 qualifies, trial 1 crashes at
    start), then study 'other' in b.db. The run of 'other' is the last one."""
    t = Tuner(tmp_path_factory.mktemp("two-storages"))
    try:
        space = t.space(FAULT_SPACE)
        done = t.run("run", "--trials", "1", "--space", str(space), *SIM)
        assert done.returncode == 0, done.stderr[-3000:]
        done = t.run("run", "--trials", "2", "--space", str(space), *SIM, env={"TUNER_SIM_FAULTS": "crash_at_start"})
        assert done.returncode == 0, done.stderr[-3000:]
        t.default_run = done.stderr
        done = t.run("run", "--trials", "1", "--space", str(t.space(OTHER_SPACE, "other.yaml")), *SIM,
                     "--storage", "sqlite:///b.db")
        assert done.returncode == 0, done.stderr[-3000:]
        t.other_run = done.stderr
        yield t
    finally:
        t.end_leftovers()


def test_the_runs_next_steps_name_the_storage_it_used(two_storages):
    steps = _steps(two_storages.other_run)
    assert [s[:4] for s in steps] == [["python", "-m", "tuner", "confirm"], ["python", "-m", "tuner", "export"],
                                      ["python", "-m", "tuner", "report"],
                                      ["optuna-dashboard", "sqlite:///b.db", "--artifact-dir", "runs/artifacts"]]
    for step in steps[:3]:
        assert step[4:6] == ["--storage", "sqlite:///b.db"], step
        assert "--study" not in step  # b.db holds one study: the default picks it
    # The default storage is the default: nothing to add.
    assert all("--storage" not in s for s in _steps(two_storages.default_run))
    # The export step, run as printed, exports the study of that run.
    done = two_storages.run(*_tuner_argv(steps[1]), "--out", "printed.yaml")
    assert done.returncode == 0, done.stderr
    assert (two_storages.folder / "printed.yaml").read_text().startswith("# Best configuration of study 'other': ")


def test_export_without_storage_exports_the_last_runs_study_and_says_so(two_storages):
    done = two_storages.run("export")
    assert done.returncode == 0, done.stderr
    winner = optuna.load_study(study_name="other", storage=f"sqlite:///{two_storages.folder / 'b.db'}").best_trial
    lines = done.stderr.splitlines()
    assert lines[0].startswith(f"study 'other' (sqlite:///b.db): wrote best.yaml: trial {winner.number}, "), lines[0]
    assert lines[1] == ("note: study 'other' on sqlite:///b.db, where the last run in this folder went "
                        "(runs/last-run.json); --storage picks another; sqlite:///trials.db holds 'faults': "
                        "python -m tuner export --storage sqlite:///trials.db")
    header = (two_storages.folder / "best.yaml").read_text().splitlines()[0]
    assert header.startswith(f"# Best configuration of study 'other': trial {winner.number}, ")
    # The launch command alone on stdout, as the file's header gives it.
    assert done.stdout == "python -m sglang.launch_server --config best.yaml --host 0.0.0.0 --port 30000\n"


def test_an_explicit_storage_is_read_and_the_last_run_named(two_storages):
    done = two_storages.run("export", "--storage", "sqlite:///trials.db", "--out", "faults.yaml")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("study 'faults' (sqlite:///trials.db): wrote faults.yaml: trial 0, "), lines[0]
    assert lines[1].startswith("note: the last run in this folder (")
    assert lines[1].endswith(") went to study 'other' on sqlite:///b.db, not to sqlite:///trials.db; for it: "
                             "python -m tuner export --storage sqlite:///b.db")
    assert (two_storages.folder / "faults.yaml").read_text().startswith("# Best configuration of study 'faults': ")


def test_show_names_the_study_and_its_winner_first(two_storages):
    done = two_storages.run("show", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "study 'other' (sqlite:///b.db), 1 trial; winner: trial 0 (not confirmed)"
    assert "note: study 'other' on sqlite:///b.db, where the last run in this folder went" in done.stderr
    done = two_storages.run("show", "--storage", "sqlite:///trials.db", env={"COLUMNS": "200"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("study 'faults' (sqlite:///trials.db), 2 trials; "
                                           "winner: trial 0 (not confirmed)")


def test_show_reads_one_crash_as_a_suspicion(two_storages):
    """One crash at start, at a schedule-conservativeness beyond the baseline's: suspected, not blamed as a fact."""
    out = two_storages.run("show", "--storage", "sqlite:///trials.db", env={"COLUMNS": "200"}).stdout
    assert re.search(r"\nfailures, and the values the search blames \(knowledge export writes the same\):\n"
                     r"  crash_on_start: 1 trial\(s\)\n"
                     r"    `schedule-conservativeness: [<>]= [\d.]+` may crash at start \(1 failed trial: 1; none ran "
                     r"fine with it\)\n", out), out


def test_export_to_stdout_keeps_stdout_the_file(two_storages):
    assert two_storages.run("export", "--out", "file.yaml").returncode == 0
    done = two_storages.run("export", "--out", "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# Best configuration of study 'other': ")
    assert yaml.safe_load(done.stdout) == yaml.safe_load((two_storages.folder / "file.yaml").read_text())
    lines = done.stderr.splitlines()
    assert lines[0].startswith("study 'other' (sqlite:///b.db): trial 0, ") and lines[0].endswith("; written to stdout")
    assert ("launch it with: python -m sglang.launch_server --config FILE --host 0.0.0.0 --port 30000 "
            "(FILE: where you saved this)") in lines
    # The cmd format is the command: stdout has it once, stderr does not repeat it.
    done = two_storages.run("export", "--format", "cmd")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("python -m sglang.launch_server --model-path /models/instant ")
    assert "launch it with" not in done.stderr


def test_several_studies_in_one_storage_the_last_run_decides(tuner):
    for space in (tuner.space(FAULT_SPACE), tuner.space(OTHER_SPACE, "other.yaml")):
        done = tuner.run("run", "--trials", "1", "--space", str(space), *SIM)
        assert done.returncode == 0, done.stderr[-3000:]
    # trials.db holds both: the next steps name the study, not the default storage.
    assert [s[3:6] for s in _steps(done.stderr)[:3]] == [["confirm", "--study", "other"],
                                                        ["export", "--study", "other"], ["report", "--study", "other"]]
    done = tuner.run("export", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["study"] == "other"
    assert done.stderr.splitlines()[1] == ("note: sqlite:///trials.db holds 2 studies; acting on 'other', where the "
                                           "last run in this folder went; --study picks another (faults)")
    done = tuner.run("confirm", "--top", "1", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.splitlines()[0].startswith("note: sqlite:///trials.db holds 2 studies; acting on 'other'")
    assert done.stderr.splitlines()[-1] == ("next: python -m tuner export --study other (writes it with these "
                                            "medians), python -m tuner report --study other")
    done = tuner.run("export", "--format", "json", "--study", "faults")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["study"] == "faults" and "note" not in done.stderr
    # A run with another --workdir leaves its record where plain commands do not look (runs/ has an older run's):
    # its next steps name even the default storage. (The study has its trial: this run only prints its summary.)
    done = tuner.run("run", "--trials", "1", "--space", str(tuner.folder / "space.yaml"), *SIM, "--workdir", "w")
    assert done.returncode == 0, done.stderr[-3000:]
    where = ["--storage", "sqlite:///trials.db", "--study", "faults"]
    assert [s[3:8] for s in _steps(done.stderr)[:3]] == [[command, *where] for command in ("confirm", "export", "report")]


def _refused(done, expected: str) -> None:
    assert done.returncode == 2, (done.args, done.stderr)
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert expected in done.stderr, done.stderr


@pytest.mark.parametrize("command", READERS)
def test_reading_a_folder_without_a_study_creates_nothing(tuner, command):
    done = tuner.run(command, timeout=60)
    assert sorted(p.name for p in tuner.folder.iterdir()) == ["search_spaces"]  # no trials.db, no runs/artifacts
    _refused(done, "no study in sqlite:///trials.db: the file trials.db does not exist; run 'python -m tuner run'")


def test_a_file_without_a_study_is_refused_and_left_as_it_was(tuner):
    (tuner.folder / "empty.db").touch()  # e.g. made by hand: not to be turned into an Optuna database
    optuna.storages.RDBStorage(f"sqlite:///{tuner.folder / 'bare.db'}")  # tables, no study: what readers left
    tables = (tuner.folder / "bare.db").read_bytes()
    for command in ("export", "dashboard"):
        for name in ("empty.db", "bare.db"):
            _refused(tuner.run(command, "--storage", f"sqlite:///{name}", timeout=60), f"no study in sqlite:///{name};")
    assert (tuner.folder / "empty.db").read_bytes() == b"" and (tuner.folder / "bare.db").read_bytes() == tables
    assert sorted(p.name for p in tuner.folder.iterdir()) == ["bare.db", "empty.db", "search_spaces"]


@pytest.mark.parametrize("record, expected", [
    ({"storage": "sqlite:///gone.db", "study": "x", "started": "2026-01-01 00:00 UTC"},
     "no study in sqlite:///gone.db: the file gone.db does not exist; it is where the last run in this folder went "
     "(runs/last-run.json); pass --storage with the database to read"),
    ({"storage": "postgresql://tuner:***@db/tuner", "study": "x", "started": "2026-01-01 00:00 UTC"},
     "the last run in this folder went to postgresql://tuner:***@db/tuner (runs/last-run.json), whose password is "
     "not recorded; pass --storage with the whole URL"),
    ("{not json", "runs/last-run.json is not a record of a run"),
], ids=["storage-gone", "password", "malformed"])
def test_a_record_that_cannot_be_followed_is_refused(tuner, record, expected):
    (tuner.folder / "runs").mkdir()
    (tuner.folder / "runs" / "last-run.json").write_text(record if isinstance(record, str) else json.dumps(record))
    _refused(tuner.run("show"), expected)
    assert sorted(p.name for p in tuner.folder.iterdir()) == ["runs", "search_spaces"]


def test_an_explicit_default_storage_stays_in_the_printed_next_step(two_storages):
    """The last run went to b.db, so a plain command follows it there: a confirm of trials.db, asked for with
    --storage sqlite:///trials.db, must print next steps that name trials.db, or they act on the other study."""
    done = two_storages.run("confirm", "--storage", "sqlite:///trials.db", "--top", "1", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    step = next(line for line in done.stderr.splitlines() if line.startswith("next: "))
    assert "export --storage sqlite:///trials.db" in step, step
