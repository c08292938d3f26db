"""`tuner dashboard`: optuna-dashboard 0.21.0 started as a real process on a real study, read through its HTTP API.

optuna-dashboard does not display constraints set with `trial.set_constraint`, so what a person needs to see
(feasible or not, why, the metrics, the server log) must come through user attrs, the note and the artifact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import FAULT_SPACE, Tuner
from tuner.trial._procs import free_port


@pytest.fixture(scope="module")
def study_folder(tmp_path_factory):
    """Study 'faults': 3 trials that qualify, then a run with a fault that makes 2 servers produce NaN."""
    t = Tuner(tmp_path_factory.mktemp("dashboard"))
    try:
        space = t.space(FAULT_SPACE)
        done = t.run("run", "--trials", "3", "--space", str(space), "--simulate", "instant")
        assert done.returncode == 0, done.stderr[-3000:]
        done = t.run("run", "--trials", "5", "--seed", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "nan_when_batch_over=32"})
        assert done.returncode == 0, done.stderr[-3000:]
        yield t
    finally:
        t.end_leftovers()


@pytest.fixture(scope="module", params=["tuner dashboard", "optuna-dashboard"])
def dashboard(study_folder, request):
    """The dashboard process and an HTTP client on it; the process (its whole group) is always ended. Both
    `python -m tuner dashboard` and the plain `optuna-dashboard` command as the README gives it."""
    port = free_port("127.0.0.1")
    log = open(study_folder.folder / f"dashboard-{request.param}.log", "w+")  # a file, not a pipe nobody drains
    if request.param == "tuner dashboard":
        argv = study_folder.argv("dashboard", "--host", "127.0.0.1", "--port", str(port),
                                 "--storage", study_folder.storage, "--workdir", "runs")
    else:  # README: optuna-dashboard sqlite:///trials.db --artifact-dir runs/artifacts, in the run's folder
        argv = [str(Path(sys.executable).parent / "optuna-dashboard"), "sqlite:///trials.db",
                "--artifact-dir", "runs/artifacts", "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=study_folder.folder, env=study_folder.env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"dashboard exited with {proc.returncode}: {log.read()[-3000:]}")
            try:
                if client.get("/api/meta").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("dashboard did not answer /api/meta within 60 s")
            time.sleep(0.2)
        yield client
    finally:
        client.close()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def _attrs(trial: dict) -> dict[str, str]:
    return {a["key"]: a["value"] for a in trial["user_attrs"]}


def _study_id(client: httpx.Client, name: str) -> int:
    studies = client.get("/api/studies").json()["study_summaries"]
    match = [s for s in studies if s["study_name"] == name]
    assert match, studies
    assert match[0]["directions"] == ["maximize"]
    return match[0]["study_id"]


def test_every_trial_shows_outcome_metrics_note_and_log(study_folder, dashboard):
    sid = _study_id(dashboard, "faults")
    response = dashboard.get(f"/api/studies/{sid}")
    assert response.status_code == 200
    detail = response.json()
    assert detail["name"] == "faults"
    assert detail["objective_names"] == ["output_throughput"]
    served = {t["number"]: t for t in detail["trials"]}
    stored = study_folder.study("faults").get_trials()
    assert sorted(served) == [t.number for t in stored]
    for t in stored:
        trial = served[t.number]
        attrs = _attrs(trial)
        feasible = t.user_attrs["feasible"]
        assert attrs["feasible"] == str(feasible)
        assert attrs["failure_kind"] == t.user_attrs["failure_kind"]
        assert attrs["failure_kind"] == ("none" if feasible else "nan")
        for key in ("launch_command", "model_path", "engine", "total_seconds", "stage_seconds", "flags"):
            assert key in attrs, key
        if feasible:
            for metric in ("output_throughput", "total_throughput", "p99_ttft_ms", "p99_itl_ms"):
                assert float(attrs[metric]) == pytest.approx(t.user_attrs[metric])
            assert "known-answer" in attrs["gate_checks"]
        else:
            assert "NaN" in attrs["failure_message"]
            # The gate's batch-consistency sends a batch past 32 before the probe does.
            assert attrs["failure_stage"] == "gate"
        # The note: what was tried and what happened, readable without the attrs table.
        body = trial["note"]["body"]
        value = t.user_attrs["flags"]["schedule-conservativeness"]  # what was launched: on the step grid
        assert f"`schedule-conservativeness={value}`" in body
        if feasible:
            assert body.startswith(f"### Trial {t.number}: feasible")
            assert "**What happened:** gate passed" in body
        else:
            assert body.startswith(f"### Trial {t.number}: **infeasible** (nan)")
            assert "**What happened:** nan in stage `gate`" in body
        # The server log, downloadable as the artifact the dashboard lists.
        logs = [a for a in trial["artifacts"] if a["filename"] == "server.log"]
        assert len(logs) == 1, trial["artifacts"]
        assert logs[0]["mimetype"] == "text/plain"
        log = dashboard.get(f"/artifacts/{sid}/{trial['trial_id']}/{logs[0]['artifact_id']}")
        assert log.status_code == 200
        assert log.headers["content-type"].startswith("text/plain")
        on_disk = study_folder.folder / "runs" / "faults" / f"trial-{t.number}" / "server.log"
        assert log.text == on_disk.read_text()
        assert "The server is fired up and ready to roll!" in log.text


def test_dashboard_best_trial_is_a_feasible_one(study_folder, dashboard):
    sid = _study_id(dashboard, "faults")
    detail = dashboard.get(f"/api/studies/{sid}").json()
    stored = study_folder.study("faults").get_trials()
    best = max((t for t in stored if t.user_attrs["feasible"]), key=lambda t: t.value)
    assert [t["number"] for t in detail["best_trials"]] == [best.number]
    # The NaN trials were measured before they failed; they must not look like candidates.
    for t in detail["trials"]:
        if _attrs(t)["feasible"] == "False":
            assert t["state"] == "Pruned"
    importances = dashboard.get(f"/api/studies/{sid}/param_importances")
    assert importances.status_code == 200
    names = [p["name"] for p in importances.json()["param_importances"][0]]
    assert names == ["schedule-conservativeness"]


def test_dashboard_serves_its_page(dashboard):
    page = dashboard.get("/dashboard/studies/1")
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_the_study_page_shows_the_study_context(study_folder, dashboard):
    """optuna-dashboard 0.21 lists study user attrs in its study page's "Study User Attributes" table, as JSON cut
    at 1024 characters: the context is served whole, so the attr needs no note of its own."""
    import json

    sid = _study_id(dashboard, "faults")
    served = {a["key"]: a["value"] for a in dashboard.get(f"/api/studies/{sid}").json()["user_attrs"]}
    assert json.loads(served["context"]) == study_folder.study("faults").user_attrs["context"]
    assert "Study User Attributes" in dashboard.get("/static/bundle.js").text


def test_dashboard_takes_study_and_names_its_page(study_folder):
    """The notes of the readers suggest --study; `dashboard --study X` was refused with the top-level usage. It
    now opens that study's page (optuna-dashboard serves them all) and refuses a study the storage lacks."""
    done = study_folder.run("dashboard", "--storage", study_folder.storage, "--study", "nope")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"error: no study 'nope' in {study_folder.storage}; pass --study with one of: faults"], done.stderr
    port = free_port("127.0.0.1")
    proc = study_folder.start("dashboard", "--storage", study_folder.storage, "--study", "faults",
                              "--host", "127.0.0.1", "--port", str(port))
    try:
        line = proc.stdout.readline()
        url = f"http://127.0.0.1:{port}/dashboard/studies/{study_folder.study('faults')._study_id}"
        assert line.startswith(f"optuna-dashboard on {url} "), line
        deadline = time.monotonic() + 60
        while True:
            try:
                page = httpx.get(url, timeout=10)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the dashboard did not answer"
                time.sleep(0.2)
        assert page.status_code == 200 and "<html" in page.text.lower()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
