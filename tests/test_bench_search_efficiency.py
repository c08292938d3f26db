"""Smoke test of benchmarks/search_efficiency.py: its quick mode runs and prints a row for every strategy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "benchmarks" / "search_efficiency.py"


def test_quick_mode_prints_every_strategy() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--jobs", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "== glm5-nvfp4-sm120:" in out
    assert "restarts to 98%" in out and "crash/NaN 11+" in out
    table = out.split("== glm5-nvfp4-sm120:")[1].split("== Summary")[0]
    for label in ("tpe (tuner default)", "random", "random, valid only", "gp (Optuna GPSampler)", "smac (SMAC3 RF)",
                  "nevergrad (NGOpt)", "tiered grid"):
        row = next((line for line in table.splitlines() if line.strip().startswith(label)), None)
        assert row is not None, f"no row for {label}:\n{out}"
        # A figure, or the reason the strategy could not run here (GP needs torch; SMAC, Nevergrad the bench extra).
        assert "%" in row or "skipped:" in row, row
    assert "== Summary" in out and "glm5-nvfp4-sm120" in out.split("== Summary")[1]


def test_an_anchor_repeats_its_run_whatever_the_hash_seed() -> None:
    """SMAC3 follows the order of Python's hashed sets: the benchmark fixes the hash seed so that its rows repeat."""
    rows = []
    for hash_seed in ("1", "2"):
        done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--jobs", "1", "--profiles", "llama3-8b-h200",
                               "--strategies", "smac"], cwd=REPO, capture_output=True, text=True, timeout=240,
                              env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert done.returncode == 0, done.stderr[-3000:]
        table = done.stdout.split("== llama3-8b-h200:")[1].split("== Summary")[0]
        rows.append(next(line for line in table.splitlines() if line.strip().startswith("smac")))
    assert "skipped" not in rows[0] and rows[0] == rows[1], rows


def test_quick_mode_on_generated_landscapes() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--jobs", "1", "--landscapes", "validation",
                           "--landscape-offset", "1", "--strategies", "tpe", "random", "random-valid"], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "gen-3000" not in out  # left out by the offset
    for name in ("gen-3001", "gen-3002"):  # the next two validation landscapes, each with its own table
        table = out.split(f"== {name}:")[1].split("\n==")[0]
        assert "generated landscape" in table and "optimum at:" in table
        for label in ("tpe (tuner default)", "random", "random, valid only"):
            assert any(line.strip().startswith(label) and "%" in line for line in table.splitlines()), table
        assert name in out.split("== Summary")[1]
    overall = out.split("== Overall")[1]
    row = next(line for line in overall.splitlines() if line.strip().startswith("validation"))
    assert row.split()[1] == "2"  # two landscapes in the validation set
    # Each strategy against the tuner on every landscape: fewer / more restarts on at most the two landscapes.
    head_to_head = overall.split("its ratio to the best other anchor in hindsight")[1]
    for label in ("random", "random, valid only"):
        line = next(line for line in head_to_head.splitlines() if line.strip().startswith(label + " "))
        fewer, more = (int(n) for n in line.split(" / ")[0].split()[-1:] + line.split(" / ")[1].split()[:1])
        assert fewer + more <= 2, line
    # One anchor here (random valid only): the best anchor for the whole set and on each landscape, so the
    # suite's ratio to it and the ratio to the best anchor in hindsight are one figure.
    cells = row.split()
    assert cells[4] == "(random-valid)" and cells[3] == cells[5], row
    assert "gen-2000" not in out and "gen-7000" not in out  # the other sets stay out


def test_the_sets_are_named_ranges_and_test_stays_out_of_all() -> None:
    """Sampler variants are chosen on train and validation; the test range is run only when named."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import search_efficiency as se
    names = {s: se.generated_names(s) for s in ("train", "validation", "test")}
    assert names["train"][0] == "gen-2000" and len(names["train"]) == 40
    assert names["validation"] == [f"gen-{n}" for n in range(3000, 3020)]
    assert names["test"][0] == "gen-7000" and len(names["test"]) == 30
    assert se.generated_names("all") == names["train"] + names["validation"]  # never the test range
    assert se.generated_names("1030-1032") == ["gen-1030", "gen-1031", "gen-1032"]
    assert se.generated_names("validation", 2, 1) == ["gen-3001", "gen-3002"]
    assert [se.landscape_set(n) for n in ("gen-2039", "gen-3000", "gen-7029", "gen-1030", "glm5-nvfp4-sm120")] \
        == ["train", "validation", "test", "other", "shipped"]


@pytest.mark.parametrize("spelling", ["tset", "1049-1030", "10-x"])
def test_an_unknown_set_is_refused_with_the_sets_named(spelling: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--landscapes", spelling], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not done.stdout
    assert f"--landscapes {spelling!r}: name a set (train, validation, test, all, shipped) or a range" in done.stderr


def test_gpu_seconds_follow_the_startup_model() -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import search_efficiency as se
    problem = se.Problem("llama3-8b-h200")
    base = dict(problem.space.baseline)

    def cost(**change: object) -> float:
        config = problem.space.config({**base, **change})
        return problem.gpu_seconds(config, problem.measure(config, None))

    ok = cost()
    assert ok > problem.profile.startup.weight_load_s  # load, capture, then the probe
    assert cost(**{"attention-backend": "trtllm_mha"}) < ok  # refused at kernel selection, before capture
    assert cost(**{"disable-decode-cuda-graph": True}) < ok  # nothing captured (and a slower probe: still less)
    bigger = cost(**{"cuda-graph-max-bs-decode": 256, "max-running-requests": 256})
    assert bigger > cost(**{"cuda-graph-max-bs-decode": 16, "max-running-requests": 256})  # one capture per size


def test_a_better_point_a_strategy_found_raises_the_cached_optimum(tmp_path, monkeypatch) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    import _efficiency_problems
    import search_efficiency as se
    monkeypatch.setattr(_efficiency_problems, "CACHE_DIR", tmp_path)
    problem = se.Problem("llama3-8b-h200")
    base = dict(problem.space.baseline)
    config = problem.space.config(base)
    value = problem.true_value(config)
    found = se.TrialRecord(0, "none", True, value, value, 1.0, config.flags)
    low = se.Optimum(value * 0.9, {"made": "up"}, "local search from 2 starts", 10)
    se.save_optimum(problem, low)
    cached = se.true_optimum(problem, 2, False, True)
    assert cached.value == low.value and cached.method.endswith("(cached)")

    raised = se.raise_optimum(problem, cached, [[found]])
    assert raised.value == value and raised.point == dict(config.flags)
    assert raised.method == "local search from 2 starts" + se.RAISED
    assert se.raise_optimum(problem, raised, [[found]]) is raised  # nothing better: unchanged
    se.save_optimum(problem, raised)
    again = se.true_optimum(problem, 2, False, True)  # the next run starts from the raised optimum
    assert again.value == value and again.method == "local search from 2 starts" + se.RAISED + se.CACHED


def test_random_is_judged_over_its_longer_run_as_the_ratios_denominator() -> None:
    """Random gets --random-trials trials: its own row is its first --trials, a ratio to it uses all of them (a
    median censored at trials + 1 understated what random needs, and so flattered random)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import search_efficiency as se
    problem = se.Problem("llama3-8b-h200")
    optimum = se.true_optimum(problem, 2, False, False).value
    runs = {"random": [se.run_strategy(("llama3-8b-h200", "random", seed, 60, 0.0))[3] for seed in (0, 1)],
            "tpe": [se.run_strategy(("llama3-8b-h200", "tpe", seed, 8, 0.0))[3] for seed in (0, 1)]}
    stats = se.summarise(problem, runs, optimum, 8)
    rnd = stats["random"]
    assert rnd["restarts_to"] == [se.judge(problem, r[:8], optimum, 8).restarts_to for r in runs["random"]]
    whole = [se.judge(problem, r, optimum, 60).restarts_to for r in runs["random"]]
    assert rnd["as_baseline"]["restarts_to"] == whole and rnd["as_baseline"]["trials"] == 60
    assert max(whole) > 9  # random does not reach 98% within 8 trials here: the short row alone is censored
    ratio = se._versus_random(stats["tpe"], rnd, "restarts_to", 8)
    tpe_median, random_median = se._median(stats["tpe"]["restarts_to"]), se._median(whole)
    assert ratio.removeprefix(">=").removeprefix("<=") == f"{tpe_median / random_median:.2f}"
    assert ratio.startswith("<=") == (random_median > 60)
    assert se._versus_random(rnd, rnd, "restarts_to", 8) == "1.00"
