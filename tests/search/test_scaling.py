"""Scaling out: several workers on one study (PostgreSQL, SQLite), workers that die, a storage that goes
away for a moment, GPU slots on one host, and interrupts with several trials in flight.

Everything is real: `python -m tuner` processes, simulated servers, a PostgreSQL cluster
(scripts/ci_postgres.sh; tests that need it skip only when TUNER_TEST_POSTGRES_URL is unset), signals.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from itertools import combinations
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from conftest import REPO, instant_space
from tuner.trial._procs import group_members, start_time
from tuner.search._study import open_storage, study_lock
from tuner.trial._teardown import boot_id, end_orphans, this_worker, write_record

PG_ENV = "TUNER_TEST_POSTGRES_URL"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
FAST_HEARTBEAT = {"TUNER_HEARTBEAT_INTERVAL": "1", "TUNER_GRACE_PERIOD": "3"}

# Four points only, so that workers keep proposing configurations another worker is already running.
FEW_POINTS = instant_space("scale", stall_timeout=5, probe_timeout=10, params=(
    "  schedule-conservativeness: {type: float, low: 0.5, high: 1.25, step: 0.25}\n"))

# Every configuration needs two GPUs (tp 2): on 8 emulated GPUs, four trials at once.
TP2 = instant_space("slots", stall_timeout=5, probe_timeout=10, server="  fixed: {tp-size: 2}\n")


# -- fixtures and helpers ---------------------------------------------------------------------------------

@pytest.fixture
def pg_url():
    """A fresh database on the test cluster for each test, dropped afterwards."""
    base = os.environ.get(PG_ENV)
    if not base:
        pytest.skip(f"{PG_ENV} is not set (scripts/ci_postgres.sh start prints it)")
    import sqlalchemy as sa

    name = f"tuner_t{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE DATABASE {name}"))
    url = sa.engine.make_url(base).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture
def procs():
    """Tuner processes a test starts (each in its own session): killed with their group at the end."""
    started: list[subprocess.Popen] = []
    yield started
    for p in started:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=10)


def start(tuner, procs, *args, env=None) -> subprocess.Popen:
    p = tuner.start(*args, env=env)
    procs.append(p)
    return p


def finish(p: subprocess.Popen, timeout: float = 120) -> tuple[int, str]:
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def load(storage: str, name: str) -> optuna.Study:
    return optuna.load_study(study_name=name, storage=storage)


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if t.state in FINISHED]


def count_finished(storage: str, name: str) -> int:
    """Finished trials of a study that may not exist yet (0 then)."""
    try:
        return len(finished(load(storage, name)))
    except Exception:  # not created yet, or its schema being created by the workers this very moment
        return 0


def server_records(folder: Path) -> dict[int, dict]:
    """trial number -> server record, for every server recorded under `folder` (one being written is skipped)."""
    out = {}
    for path in folder.glob("**/trial-*/server.json"):
        try:
            out[int(path.parent.name.split("-")[1])] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return out


def live_servers(folder: Path) -> dict[int, dict]:
    """trial number -> server record, for recorded servers whose process is alive right now."""
    return {number: record for number, record in server_records(folder).items()
            if not record.get("stopped") and start_time(record["pid"]) == record["start_time"]}


def wait_for(condition, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def ran_a_server(t: optuna.trial.FrozenTrial) -> bool:
    return t.user_attrs.get("reused_from") is None and t.user_attrs.get("failure_kind") != "surplus"


def assert_no_config_ran_twice_at_once(trials: list[optuna.trial.FrozenTrial]) -> None:
    ran = [t for t in trials if ran_a_server(t) and t.user_attrs.get("started_at")]
    for a, b in combinations(ran, 2):
        if a.user_attrs["config_key"] != b.user_attrs["config_key"]:
            continue
        a_end = a.user_attrs.get("ended_at") or a.datetime_complete.timestamp()
        b_end = b.user_attrs.get("ended_at") or b.datetime_complete.timestamp()
        assert a_end <= b.user_attrs["started_at"] or b_end <= a.user_attrs["started_at"], \
            f"trials {a.number} and {b.number} ran {a.params} at the same time"


def assert_only_surplus_failed(study: optuna.Study) -> None:
    for t in study.get_trials():
        assert t.state in FINISHED or (t.state == TrialState.FAIL and t.user_attrs.get("failure_kind") == "surplus"), \
            (t.number, t.state, t.user_attrs.get("failure_kind"))


# -- several workers on one study ----------------------------------------------------------------------------

def test_three_workers_share_one_postgres_study(tuner, procs, pg_url):
    """Three processes start at once on a fresh database: one creates the schema and the study, the others
    load it; together they finish exactly N trials, the baseline once, and never run one configuration
    twice at the same time (the four-point space makes them propose the same points constantly)."""
    space = tuner.space(FEW_POINTS)
    env = {**FAST_HEARTBEAT, "TUNER_SIM_FAULTS": "response_delay=0.05"}
    workers = [start(tuner, procs, "run", "--trials", "9", "--space", str(space), "--simulate", "instant",
                     "--storage", pg_url, "--study", "shared", "--workdir", f"runs/w{i}", env=env)
               for i in range(3)]
    results = [finish(p) for p in workers]
    for code, out in results:
        assert code == 0, out[-3000:]
        assert "Traceback" not in out and "database is locked" not in out, out[-3000:]
    study = load(pg_url, "shared")
    done = finished(study)
    assert len(done) == 9
    assert_only_surplus_failed(study)
    baseline = [t for t in study.get_trials() if t.user_attrs.get("baseline")]
    assert [t.number for t in baseline] == [0]
    assert_no_config_ran_twice_at_once(study.get_trials())
    # A configuration is started once; its repeats reuse the result.
    keys = [t.user_attrs["config_key"] for t in done if ran_a_server(t)]
    assert len(keys) == len(set(keys))
    workers_seen = {t.user_attrs["worker"] for t in done}
    print(f"trials per worker: { {w: sum(t.user_attrs['worker'] == w for t in done) for w in workers_seen} }")
    assert len(workers_seen) >= 2
    assert tuner.leftovers() == {}


def test_killed_worker_trial_is_retried_once_by_another_and_its_server_ended(tuner, procs, pg_url):
    """SIGKILL one of two workers mid-trial: the other fails the trial when its heartbeat is stale, runs
    the retry, and finishes the study; the killed worker's server, orphaned in its own process group,
    is ended when that worker is started again in its folder."""
    space = tuner.space(FEW_POINTS.replace("step: 0.25", "step: 0.01"))
    env = {**FAST_HEARTBEAT, "TUNER_SIM_FAULTS": "response_delay=0.1"}
    args = ("run", "--trials", "6", "--space", str(space), "--simulate", "instant", "--storage", pg_url,
            "--study", "kill")
    a = start(tuner, procs, *args, "--workdir", "runs/a", env=env)
    b = start(tuner, procs, *args, "--workdir", "runs/b", env=env)
    number, server = next(iter(wait_for(lambda: live_servers(tuner.folder / "runs" / "a"), 60,
                                        "a server of worker a").items()))
    os.kill(a.pid, signal.SIGKILL)
    a.wait(timeout=10)
    assert group_members(server["pgid"]), "the killed worker's server should outlive it"

    code, out = finish(b)
    assert code == 0, out[-3000:]
    study = load(pg_url, "kill")
    trials = {t.number: t for t in study.get_trials()}
    assert trials[number].state == TrialState.FAIL
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == number]
    assert len(retries) == 1, "re-queued exactly once"
    retry = retries[0]
    assert retry.state in FINISHED and retry.params == trials[number].params
    assert retry.user_attrs["worker"].endswith(f":{b.pid}")
    assert retry.user_attrs.get("retry_of") == number
    assert len(finished(study)) == 6
    assert_only_surplus_failed_or(study, {number})
    assert_no_config_ran_twice_at_once(list(trials.values()))

    # The orphan is still there until worker a comes back in its folder.
    assert group_members(server["pgid"])
    back = tuner.run(*args, "--workdir", "runs/a", env=env)
    assert back.returncode == 0, back.stderr[-2000:]
    assert "ended 1 server(s)" in back.stderr, back.stderr[-2000:]
    assert not group_members(server["pgid"]), "restarting the killed worker must end its orphaned server"
    assert tuner.leftovers() == {}


def assert_only_surplus_failed_or(study: optuna.Study, allowed: set[int]) -> None:
    for t in study.get_trials():
        if t.number in allowed:
            continue
        assert t.state in FINISHED or t.user_attrs.get("failure_kind") == "surplus", (t.number, t.state)


def test_restarted_worker_fails_its_own_trial_at_once_and_a_retry_dies_only_once(tuner, procs):
    """A worker killed twice, the second time while running the retry of the first trial it lost. Each
    restart in the same folder fails the dead run's trial at once (no waiting out the 60 s grace period),
    ends its orphaned server, and the first trial is re-queued once: the retry that died too is not."""
    space = tuner.space(FEW_POINTS.replace("step: 0.25", "step: 0.01"))
    env = {"TUNER_HEARTBEAT_INTERVAL": "1", "TUNER_GRACE_PERIOD": "60", "TUNER_SIM_FAULTS": "response_delay=0.1"}
    args = ("run", "--trials", "4", "--space", str(space), "--simulate", "instant", "--storage", tuner.storage)
    runs = tuner.folder / "runs"

    first = start(tuner, procs, *args, env=env)
    lost, server1 = next(iter(wait_for(lambda: live_servers(runs), 60, "the first server").items()))
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=10)

    second = start(tuner, procs, *args, env=env)
    lines = []

    def retry_running():
        study = load(tuner.storage, "scale")
        for t in study.get_trials(states=(TrialState.RUNNING,)):
            if t.system_attrs.get("failed_trial") == lost and t.number in live_servers(runs):
                return t.number
        return None

    retry = wait_for(retry_running, 60, "the retry of the lost trial to run", poll=0.2)
    os.kill(second.pid, signal.SIGKILL)
    second.wait(timeout=10)
    lines.append(second.stdout.read())
    assert f"failed trial(s) [{lost}]" in lines[0], lines[0][-2000:]
    assert "ended 1 server(s)" in lines[0]
    assert not group_members(server1["pgid"])

    third = tuner.run(*args, env=env, timeout=120)
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"failed trial(s) [{retry}]" in third.stderr and "ended 1 server(s)" in third.stderr
    study = load(tuner.storage, "scale")
    trials = {t.number: t for t in study.get_trials()}
    assert trials[lost].state == TrialState.FAIL and trials[retry].state == TrialState.FAIL
    assert trials[retry].user_attrs["failure_kind"] == "worker_died"
    # Its server was up when the worker died: the record said which stage the trial was in.
    assert trials[retry].user_attrs["failure_message"].startswith("the worker running it died during its ")
    assert trials[retry].system_attrs["retry_history"] == [lost]
    # Not retried forever: nothing carries the retry's number in its history.
    assert not [t for t in trials.values() if retry in t.system_attrs.get("retry_history", [])]
    assert [t.number for t in trials.values() if t.system_attrs.get("failed_trial") == lost] == [retry]
    assert len(finished(study)) == 4
    assert tuner.leftovers() == {}


# -- the storage: locked SQLite, PostgreSQL restarted ---------------------------------------------------------

def test_sqlite_workers_wait_out_a_locked_database(tuner, procs):
    """Two workers on one SQLite file. The test holds an exclusive lock for 3 s mid-run with SQLite's own
    wait cut to 0.3 s: every storage call hits "database is locked", is retried, and the run goes on."""
    space = tuner.space(FEW_POINTS.replace("step: 0.25", "step: 0.01"))
    env = {**FAST_HEARTBEAT, "TUNER_GRACE_PERIOD": "10", "TUNER_SQLITE_TIMEOUT": "0.3",
           "TUNER_SIM_FAULTS": "response_delay=0.05"}
    args = ("run", "--trials", "6", "--space", str(space), "--simulate", "instant", "--storage", tuner.storage)
    workers = [start(tuner, procs, *args, "--workdir", f"runs/w{i}", env=env) for i in range(2)]
    wait_for(lambda: (tuner.folder / "trials.db").exists() and count_finished(tuner.storage, "scale") >= 1,
             90, "a first finished trial", poll=0.2)
    db = sqlite3.connect(tuner.folder / "trials.db", timeout=30, isolation_level=None)
    db.execute("BEGIN EXCLUSIVE")
    time.sleep(3.0)
    db.execute("COMMIT")
    db.close()
    outs = [finish(p) for p in workers]
    for code, out in outs:
        assert code == 0, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
    assert any("storage unavailable" in out and "database is locked" in out for _, out in outs), \
        "the lock was never hit: the test did not test anything"
    study = load(tuner.storage, "scale")
    assert len(finished(study)) == 6
    assert_only_surplus_failed(study)
    assert tuner.leftovers() == {}


def test_study_lock_leaves_sqlites_own_locks_alone(tmp_path):
    """CI caught a worker whose trials after the first never reached trials.db: the lock taken around each
    decision opened and closed the database file, which drops every POSIX lock SQLite holds on it in that
    process, so another process's connection closed believing itself the last, checkpointed and removed the
    write-ahead log under the first, and the first one's later commits went to a deleted file."""
    path = tmp_path / "trials.db"
    study = optuna.create_study(study_name="lock", storage=open_storage(f"sqlite:///{path}"))
    study.set_user_attr("before", 1)  # the worker's connection stays open in its pool, in WAL mode
    with study_lock(study):
        pass
    other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM studies'); c.close()"
    subprocess.run([sys.executable, "-c", other, str(path)], check=True, timeout=60)
    study.set_user_attr("after", 2)
    read = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
            "print(sorted(k for k, in c.execute('SELECT key FROM study_user_attributes')))")
    seen = subprocess.run([sys.executable, "-c", read, str(path)], check=True, timeout=60,
                          capture_output=True, text=True).stdout.strip()
    assert seen == "['after', 'before']", f"another process sees only {seen}: a commit was lost"


CTL = REPO / "scripts" / "ci_postgres.sh"


def _our_cluster(pg_url: str) -> None:
    """The outage tests stop and start the server: it must be scripts/ci_postgres.sh's."""
    from sqlalchemy.engine import make_url

    ours = subprocess.run([str(CTL), "url"], capture_output=True, text=True)
    if ours.returncode != 0 or make_url(ours.stdout.strip()).port != make_url(pg_url).port:
        pytest.fail(f"{PG_ENV} must be the cluster of scripts/ci_postgres.sh: this test stops and starts it")


def test_the_study_lock_outlives_a_postgres_restart(pg_url, caplog):
    """CI caught a worker ended by the server's restart while it held the study lock: releasing the lock on the
    dropped connection raised. The server ends that session and its lock with it; the release says so in the
    log, and taking the lock while the server is away waits for it as every storage call does."""
    _our_cluster(pg_url)
    study = optuna.create_study(study_name="lock", storage=open_storage(pg_url))
    try:
        with study_lock(study):
            subprocess.run([str(CTL), "pause"], check=True, timeout=60)
            subprocess.run([str(CTL), "resume"], check=True, timeout=60)
        subprocess.run([str(CTL), "pause"], check=True, timeout=60)
        back = threading.Timer(2.0, lambda: subprocess.run([str(CTL), "resume"], check=True, timeout=60))
        back.start()
        with study_lock(study):
            study.set_user_attr("decided", True)
        back.join()
    finally:
        subprocess.run([str(CTL), "resume"], check=True, timeout=60)
    assert load(pg_url, "lock").user_attrs == {"decided": True}
    assert "the study lock's connection dropped" in caplog.text


def test_postgres_stopped_for_seconds_mid_run_loses_no_trial(tuner, procs, pg_url):
    """Stop the PostgreSQL server for 3 s while two workers run, then start it again: storage calls are
    retried (pool_pre_ping replaces the dropped connections), the workers finish, nothing is lost."""
    _our_cluster(pg_url)
    space = tuner.space(FEW_POINTS.replace("step: 0.25", "step: 0.01"))
    env = {"TUNER_HEARTBEAT_INTERVAL": "1", "TUNER_GRACE_PERIOD": "15", "TUNER_SIM_FAULTS": "response_delay=0.05"}
    args = ("run", "--trials", "6", "--space", str(space), "--simulate", "instant", "--storage", pg_url,
            "--study", "outage")
    workers = [start(tuner, procs, *args, "--workdir", f"runs/w{i}", env=env) for i in range(2)]

    wait_for(lambda: count_finished(pg_url, "outage") >= 1, 90, "a first finished trial", poll=0.2)
    try:
        subprocess.run([str(CTL), "pause"], check=True, timeout=60)
        time.sleep(3.0)
    finally:
        subprocess.run([str(CTL), "resume"], check=True, timeout=60)
    outs = [finish(p) for p in workers]
    for code, out in outs:
        assert code == 0, out[-3000:]
        assert "Traceback" not in out, out[-3000:]
    assert any("storage unavailable" in out for _, out in outs), "the outage was never noticed"
    study = load(pg_url, "outage")
    assert len(finished(study)) == 6
    assert_only_surplus_failed(study)
    assert tuner.leftovers() == {}


# -- GPU slots on one host -------------------------------------------------------------------------------------

def visible_devices_by_trial(runs: Path, events: Path) -> dict[int, str]:
    """trial number -> the CUDA_VISIBLE_DEVICES its server process started with (the simulator's own "start"
    event, matched to the trial by the pid in the trial's server record)."""
    by_pid = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "start":
            by_pid[event["pid"]] = event["cuda_visible_devices"] or "<unset>"
    return {number: by_pid[record["pid"]] for number, record in server_records(runs).items()
            if record["pid"] in by_pid}


def intervals(trials):
    return [t for t in trials if t.user_attrs.get("slot_acquired_at") and t.user_attrs.get("slot_released_at")]


def overlap(a, b) -> bool:
    return (a.user_attrs["slot_acquired_at"] < b.user_attrs["slot_released_at"]
            and b.user_attrs["slot_acquired_at"] < a.user_attrs["slot_released_at"])


def test_four_slots_on_eight_gpus_keep_subsets_disjoint(tuner):
    """tp 2 on 8 emulated GPUs: four trials at once, each on its own two GPUs, told so through
    CUDA_VISIBLE_DEVICES; trials that overlap in time never share a GPU or a parameter value."""
    space = tuner.space(TP2)
    events = tuner.folder / "events.jsonl"
    env = {"TUNER_SIM_FAULTS": "response_delay=0.1,slow_start_no_log=0.3", "TUNER_SIM_EVENTS": str(events)}
    done = tuner.run("run", "--trials", "14", "--space", str(space), "--simulate", "instant",
                     "--gpus", "0-7", env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "up to 4 trials at once" in done.stderr
    study = load(tuner.storage, "slots")
    trials = finished(study)
    assert len(trials) == 14
    # Every trial that ran a server held a slot; a repeated configuration is answered from its twin and runs
    # nothing (one of the 14 was, once in a full run here).
    held = intervals(trials)
    ran = [t for t in trials if "reused_from" not in t.user_attrs]
    assert [t.number for t in held] == [t.number for t in ran] and len(held) >= 10
    for t in held:
        assert len(t.user_attrs["gpu_ids"]) == 2 and t.user_attrs["effective_args"]["tp_size"] == 2
        assert t.user_attrs["feasible"] or t.user_attrs.get("stopped_early"), t.user_attrs.get("failure_message")
    most = 0
    for t in held:
        at = t.user_attrs["slot_acquired_at"]
        most = max(most, sum(1 for u in held if u.user_attrs["slot_acquired_at"] <= at < u.user_attrs["slot_released_at"]))
    pairs = [(a, b) for a, b in combinations(held, 2) if overlap(a, b)]
    for a, b in pairs:
        assert not set(a.user_attrs["gpu_ids"]) & set(b.user_attrs["gpu_ids"]), (a.number, b.number)
        assert a.params != b.params, f"trials {a.number} and {b.number} ran the same point at once"
    print(f"{len(pairs)} overlapping pairs, at most {most} trials at once")
    assert most >= 2 and pairs, "the trials never ran in parallel"
    # Each server saw exactly the GPUs its trial was granted.
    seen = visible_devices_by_trial(tuner.folder / "runs", events)
    assert {t.number: seen.get(t.number) for t in held} == {
        t.number: ",".join(map(str, t.user_attrs["gpu_ids"])) for t in held}
    assert tuner.leftovers() == {}


def test_sigterm_stops_every_parallel_trial_and_resume_finishes(tuner, procs):
    """SIGTERM while four trials run at once: each stops at its next check, every server is torn down,
    each trial is marked interrupted (FAIL, not taught to the sampler), and a resume runs each again. A trial
    whose measurement had ended before the signal (its server was being torn down) keeps its result."""
    space = tuner.space(TP2)
    env = {"TUNER_SIM_FAULTS": "response_delay=0.3"}
    args = ("run", "--trials", "8", "--space", str(space), "--simulate", "instant", "--gpus", "0-7")
    p = start(tuner, procs, *args, env=env)
    running = wait_for(lambda: (lambda s: s if len(s) >= 3 else None)(live_servers(tuner.folder / "runs")),
                       90, "three servers at once")
    t0, signalled_at = time.monotonic(), time.time()
    p.send_signal(signal.SIGTERM)
    code, out = finish(p, timeout=60)
    print(f"stopped {len(running)} running trials in {time.monotonic() - t0:.1f} s")
    assert code == 143, out[-3000:]  # 128 + SIGTERM
    assert "resume" in out
    assert tuner.leftovers() == {}
    study = load(tuner.storage, "slots")
    trials = {t.number: t for t in study.get_trials()}
    assert not [t for t in trials.values() if t.state in (TrialState.RUNNING, TrialState.WAITING)]
    for number in running:
        t = trials[number]
        if t.state == TrialState.COMPLETE:  # measured before the signal (1 s for its delivery under load)
            measuring = sum(v for stage, v in t.user_attrs["stage_seconds"].items() if stage != "teardown")
            assert t.user_attrs["slot_acquired_at"] + measuring < signalled_at + 1.0, (number, t.user_attrs)
            continue
        assert t.state == TrialState.FAIL and t.user_attrs["failure_kind"] == "interrupted", (number, t.state)
        assert t.user_attrs.get("ended_at")
    assert any(trials[n].state == TrialState.FAIL for n in running)  # the signal stopped trials mid-run
    for t in trials.values():
        assert t.state in FINISHED or t.user_attrs.get("failure_kind") == "interrupted", (t.number, t.user_attrs)

    again = tuner.run(*args, env={"TUNER_SIM_FAULTS": "response_delay=0.05"}, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    study = load(tuner.storage, "slots")
    done = finished(study)
    assert len(done) == 8
    interrupted = [t for t in study.get_trials() if t.user_attrs.get("failure_kind") == "interrupted"]
    for t in interrupted:
        reruns = [u for u in study.get_trials() if u.user_attrs.get("requeued_from") == t.number]
        assert len(reruns) == 1 and reruns[0].params == t.params
    assert tuner.leftovers() == {}


# -- end_orphans: only what this folder recorded, only where the worker is gone -----------------------------

def _session(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(list(argv), start_new_session=True, stdin=subprocess.DEVNULL)


def _record_server(folder: Path, proc: subprocess.Popen, owner: dict | None, start: int | None = None) -> Path:
    trial = folder / f"trial-{proc.pid}"
    write_record(trial / "server.json", {"pid": proc.pid, "pgid": proc.pid,
                                         "start_time": start_time(proc.pid) if start is None else start})
    if owner is not None:
        write_record(trial / "worker.json", owner)
    return trial


def test_end_orphans_ends_only_recorded_servers_of_dead_workers(tmp_path):
    # A worker that has exited: its pid with its start time no longer runs.
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    dead_owner = {"host": socket.gethostname(), "boot_id": boot_id(), "pid": gone.pid,
                  "start_time": start_time(gone.pid)}
    gone.wait()
    sleep = ("sleep", "60")
    orphan = _session(*sleep)
    live_owned = _session(*sleep)
    reused = _session(*sleep)
    elsewhere = _session(*sleep)
    legacy = _session(*sleep)
    unrecorded = _session(*sleep)  # same command line as the others, recorded nowhere
    everything = [orphan, live_owned, reused, elsewhere, legacy, unrecorded]
    try:
        _record_server(tmp_path, orphan, dead_owner)
        _record_server(tmp_path, live_owned, this_worker())  # a live worker sharing the folder
        _record_server(tmp_path, reused, dead_owner, start=start_time(reused.pid) - 1)  # pid reused since
        _record_server(tmp_path, elsewhere, {**dead_owner, "host": "another-host"})
        _record_server(tmp_path, legacy, None)  # written before worker records existed: the record decides

        ended = end_orphans(tmp_path)
        assert sorted(ended) == sorted([orphan.pid, legacy.pid])
        for p in (orphan, legacy):
            assert p.wait(timeout=10) == -signal.SIGTERM
        for p in (live_owned, reused, elsewhere, unrecorded):
            assert p.poll() is None, f"{p.pid} must not have been signalled"
        records = {p: json.loads((tmp_path / f"trial-{p.pid}" / "server.json").read_text()) for p in
                   (orphan, live_owned, reused, elsewhere, legacy)}
        assert records[orphan].get("stopped") and records[legacy].get("stopped") and records[reused].get("stopped")
        assert not records[live_owned].get("stopped") and not records[elsewhere].get("stopped")
        assert end_orphans(tmp_path) == []  # idempotent
    finally:
        for p in everything:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
