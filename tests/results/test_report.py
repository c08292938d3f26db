"""`tuner report`: a real study (tuner process, simulated servers, SQLite), then the page and its charts."""

from __future__ import annotations

import html
import re
import shlex

import optuna
import pytest

from conftest import FAULT_SPACE, Tuner
from tuner.results._show import failure_breakdown
from tuner.flags import build_parser

PNG = b"\x89PNG\r\n\x1a\n"
IMAGES = ("history.png", "pareto.png", "importance.png", "stages.png", "failures.png")


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Study 'faults': 3 trials that qualify, then 2 whose servers produce NaN under load (a second run with a
    fault switched on, another seed so that the sampler proposes new values)."""
    t = Tuner(tmp_path_factory.mktemp("report"))
    try:
        space = t.space(FAULT_SPACE.replace(
            "  stall-timeout: 3\n", "  stall-timeout: 3\n  fixed: {trust-remote-code: true, disable-cuda-graph: true}\n"))
        done = t.run("run", "--trials", "3", "--space", str(space), "--simulate", "instant")
        assert done.returncode == 0, done.stderr[-3000:]
        done = t.run("run", "--trials", "5", "--seed", "1", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "nan_when_batch_over=32"})
        assert done.returncode == 0, done.stderr[-3000:]
        trials = t.study("faults").get_trials()
        assert [tr.user_attrs["feasible"] for tr in trials] == [True, True, True, False, False], \
            [tr.user_attrs.get("failure_kind") for tr in trials]
        yield t
    finally:
        t.end_leftovers()


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG, f"{path.name} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_report_writes_a_page_with_every_chart(mixed):
    done = mixed.run("report", "--out", "out/report")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrote out/report/index.html" in done.stderr
    folder = mixed.folder / "out" / "report"
    for name in IMAGES:
        width, height = _png_size(folder / name)
        assert width > 300 and height > 150, name
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "temporary files left behind"
    page = (folder / "index.html").read_text()
    for name in IMAGES:
        assert f'src="{name}"' in page
    study = mixed.study("faults")
    trials = study.get_trials()
    # The failure breakdown is the one `tuner show` prints, computed from the same trials.
    assert html.escape(failure_breakdown(trials)) in page
    assert "nan: 2 trial(s)" in page
    # Best configuration: the qualified trial with the highest throughput, named as export and show name it,
    # with the command line it was launched with, which SGLang's parser takes as it stands.
    best = max((tr for tr in trials if tr.user_attrs["feasible"]), key=lambda tr: tr.value)
    assert (f"Winner: trial {best.number}, not confirmed: output_throughput "
            f"{best.user_attrs['output_throughput']:,.1f} from one run") in page
    argv = shlex.split(html.unescape(page.split("<p>Launched as: <code>", 1)[1].split("</code>", 1)[0]))
    assert argv[:3] == ["python", "-m", "sglang.launch_server"]
    assert "--trust-remote-code" in argv and not any("=True" in a for a in argv), argv
    parsed = build_parser("0.5.23").parse_args(argv[3:])
    assert parsed.trust_remote_code is True and parsed.disable_cuda_graph is True
    assert parsed.schedule_conservativeness == pytest.approx(best.params["schedule-conservativeness"])
    # What failed restarts cost: the stage seconds of the trials that did not qualify, summed.
    total = sum(sum(tr.user_attrs["stage_seconds"].values()) for tr in trials)
    lost = sum(sum(tr.user_attrs["stage_seconds"].values()) for tr in trials if not tr.user_attrs["feasible"])
    assert f"{total:.1f} s spent in trials, of which {lost:.1f} s" in page
    # The Pareto note names the non-dominated qualified trials (higher throughput, lower p99 TTFT).
    ok = [tr for tr in trials if tr.user_attrs["feasible"] and "reused_from" not in tr.user_attrs]
    point = {tr.number: (tr.user_attrs["output_throughput"], tr.user_attrs["p99_ttft_ms"]) for tr in ok}
    front = [a for a, (thr, ttft) in point.items()
             if not any(o_thr >= thr and o_ttft <= ttft and (o_thr, o_ttft) != (thr, ttft)
                        for o_thr, o_ttft in point.values())]
    note = page.split("Pareto front (no other feasible trial", 1)[1].split("</p>", 1)[0]
    assert sorted(int(n) for n in re.findall(r"trial (\d+) \(", note)) == sorted(front)
    # Importance was computed over the three qualified trials (Optuna's own evaluator), not noted away.
    assert "Importance of each parameter for output_throughput, over 3 qualified trials" in page
    # Every trial has a row, the NaN ones marked as such.
    for tr in trials:
        outcome = "qualified" if tr.user_attrs["feasible"] else f"failed: {tr.user_attrs['failure_kind']}"
        assert f"<td>{tr.number}</td><td>{outcome}" in page
    # Counted as show counts them: a trial that did not qualify failed (Optuna calls it pruned).
    qualified = sum(1 for tr in trials if tr.user_attrs["feasible"])
    assert f"{len(trials)} finished: {qualified} qualified, {len(trials) - qualified} failed" in page
    assert "pruned" not in page
    assert page.count("<td>failed: nan</td>") == 2


def test_report_of_a_study_where_everything_failed_explains_instead_of_crashing(tuner):
    space = tuner.space(FAULT_SPACE)
    done = tuner.run("run", "--trials", "2", "--space", str(space), "--simulate", "instant",
                     env={"TUNER_SIM_FAULTS": "crash_at_start"})
    assert done.returncode == 0, done.stderr[-3000:]
    done = tuner.run("report")
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tuner.folder / "report" / "index.html").read_text()
    assert "No trial passed every gate: nothing may be deployed." in page
    assert "Parameter importance needs at least 3 qualified trials" in page
    assert "No trial finished a throughput measurement" in page
    # Charts that have nothing to show are not drawn; the rest are.
    for name in ("history.png", "stages.png", "failures.png"):
        _png_size(tuner.folder / "report" / name)
    assert not (tuner.folder / "report" / "importance.png").exists()
    assert not (tuner.folder / "report" / "pareto.png").exists()
    assert "crash_on_start: 2 trial(s)" in page


def test_bad_input_is_one_line_and_writes_nothing(mixed, tmp_path):
    def refused(*args: str, expect: str) -> None:
        done = mixed.run("report", "--out", str(tmp_path / "never"), *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: "), done.stderr
        assert expect in done.stderr, done.stderr
        assert not (tmp_path / "never").exists()

    missing = tmp_path / "missing.db"
    refused("--storage", f"sqlite:///{missing}", expect="does not exist")
    assert not missing.exists(), "the report created the database it was asked to read"
    refused("--storage", "trials.db", expect="is not a URL")
    refused("--study", "nope", expect="no study named 'nope'")
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    optuna.create_study(study_name="empty", storage=empty)
    refused("--storage", empty, expect="study 'empty' has no finished trials")


def test_a_failed_report_keeps_the_previous_page_whole(mixed):
    folder = mixed.folder / "kept"
    folder.mkdir()
    (folder / "index.html").write_text("<p>previous report</p>\n")
    (folder / "stages.png").mkdir()  # the new image cannot be moved into place
    done = mixed.run("report", "--out", "kept")
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: cannot write the report into kept") and done.stderr.count("\n") == 1
    assert (folder / "index.html").read_text() == "<p>previous report</p>\n"
    assert not [p for p in folder.iterdir() if p.name.startswith(".")], "temporary files left behind"


def test_pareto_labels_never_overlap():
    """Front points closer together than their labels are wide: each label drawn goes where no other is."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tuner.results._report import label_points

    fig, ax = plt.subplots(figsize=(9, 5))
    points = [(100 + i * 2, 2000 - i * 3, f"#{i}") for i in range(12)] + [(400, 1500, "#99")]
    ax.scatter([p[0] for p in points], [p[1] for p in points])
    labels = label_points(fig, ax, points)
    renderer = fig.canvas.get_renderer()
    boxes = [label.get_window_extent(renderer=renderer) for label in labels]
    assert 4 <= len(labels) < len(points)  # crowded: some are left to the note; the lone point keeps its own
    assert "#99" in [label.get_text() for label in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    plt.close(fig)
