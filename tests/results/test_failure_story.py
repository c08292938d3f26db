"""One story per failure (issue 48): `tuner show` and `knowledge export` name the same blamed values, with the same
failed trials, from the same analysis (tuner/search/_lessons.py); a lesson drawn from one failure reads as a
suspicion. A real tuner process, simulated servers, a real SQLite study."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conftest import Tuner, instant_space

# Triton crashes at start in two trials: a fact. A chunked prefill of 16384 hangs capturing CUDA graphs in one: a
# suspicion (it ran fine with graphs off, which says nothing of the capture).
CRASH = "RuntimeError: the triton attention kernel for this head size requires SM100 (Blackwell); found SM90"
HEALTH = [{"when": {"decode_backend": "triton"}, "effect": "crash_on_start", "message": CRASH},
          {"when": {"chunked_prefill_size": 16384, "cuda_graph": True}, "effect": "hang_at_capture"}]
SPACE = instant_space(
    "story",
    params="  attention-backend: {type: categorical, choices: [fa3, flashinfer, triton]}\n"
           "  disable-cuda-graph: {type: bool}\n"
           "  chunked-prefill-size: {type: categorical, choices: [4096, 8192, 16384]}\n"
           "  max-running-requests: {type: categorical, choices: [32, 64, 128]}\n",
    baseline="{attention-backend: fa3, disable-cuda-graph: false, chunked-prefill-size: 8192, "
             "max-running-requests: 64}",
    extra="try-first:\n"
          "  - {attention-backend: triton, disable-cuda-graph: true, chunked-prefill-size: 8192, "
          "max-running-requests: 64}\n"
          "  - {attention-backend: triton, disable-cuda-graph: false, chunked-prefill-size: 4096, "
          "max-running-requests: 32}\n"
          "  - {attention-backend: fa3, disable-cuda-graph: false, chunked-prefill-size: 16384, "
          "max-running-requests: 64}\n"
          "  - {attention-backend: flashinfer, disable-cuda-graph: true, chunked-prefill-size: 16384, "
          "max-running-requests: 128}\n")
WHERE = " on SM90 with SGLang 0.5.23"  # the instant profile's GPUs and engine, as the file's sentences say them


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    t = Tuner(tmp_path_factory.mktemp("story"))
    from tuner.sim import __file__ as sim_file

    profile = yaml.safe_load((Path(sim_file).parent / "profiles" / "instant.yaml").read_text())
    profile["health"] = HEALTH
    (t.folder / "profile.yaml").write_text(yaml.safe_dump(profile))
    try:
        done = t.run("run", "--trials", "5", "--space", str(t.space(SPACE)), "--simulate", "profile.yaml")
        assert done.returncode == 0, done.stderr[-3000:]
        kinds = [t.user_attrs.get("failure_kind") for t in sorted(t.study("story").trials, key=lambda t: t.number)]
        assert kinds == ["none", "crash_on_start", "crash_on_start", "startup_timeout", "none"], kinds
        t.show = t.run("show", env={"COLUMNS": "300"})
        t.export = t.run("knowledge", "export", "--out", "k.yaml")
        assert t.show.returncode == 0 and t.export.returncode == 0, t.show.stderr + t.export.stderr
        t.entries = yaml.safe_load((t.folder / "k.yaml").read_text())["entries"]
        yield t
    finally:
        t.end_leftovers()


def _blamed_in_show(out: str) -> list[str]:
    """The blamed values' lines of show's failures section."""
    section = out[out.index("\nfailures"):out.index("\nmessages:")]
    return [line.strip() for line in section.splitlines() if line.startswith("    `")]


def test_show_and_the_knowledge_file_blame_the_same_values_with_the_same_trials(story):
    # show says what the file says, bar where (show names the context once, above).
    assert sorted(_blamed_in_show(story.show.stdout)) == sorted(e["reads"].replace(WHERE, "") for e in story.entries)
    # And knowledge export's own screen says each entry as the file reads.
    assert story.export.stderr.splitlines()[1:] == [f"  {e['reads']}" for e in story.entries]
    got = sorted((e["kind"], e["values"], e["count"], e["trials"], e.get("ran_fine")) for e in story.entries)
    assert got == [("crash_on_start", {"attention-backend": "triton"}, 2, [1, 2], 0),
                   ("startup_timeout", {"chunked-prefill-size": {"at-least": 16384}}, 1, [3], 0)]


def test_a_lesson_from_one_failure_reads_as_a_suspicion_and_one_from_two_as_a_fact(story):
    reads = {e["kind"]: e for e in story.entries}
    hang, crash = reads["startup_timeout"], reads["crash_on_start"]
    assert hang["reads"] == (f"`chunked-prefill-size: >= 16384` may hang at start capturing CUDA graphs{WHERE} "
                             "(1 failed trial: 3; none ran fine with it)")
    assert hang["suspected"] is True and hang["capture"] is True
    assert crash["reads"] == (f"`attention-backend: triton` crashes at start{WHERE} (2 failed trials: 1, 2; none ran "
                              "fine with it)")
    assert "suspected" not in crash
    assert ("    `chunked-prefill-size: >= 16384` may hang at start capturing CUDA graphs (1 failed trial: 3; none ran "
            "fine with it)") in story.show.stdout.splitlines()
