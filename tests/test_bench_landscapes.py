"""The landscape generator (benchmarks/_landscapes.py): deterministic, loadable, flag-checked, a running baseline."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import _landscapes as gen  # noqa: E402
from tuner.versions._check import check_flags, parse_help  # noqa: E402
from tuner.spec._spec import load_spec  # noqa: E402
from tuner.engines._base import flag_argv  # noqa: E402
from tuner.flags import build_parser  # noqa: E402
from tuner.sim._predict import predict  # noqa: E402
from tuner.sim._profile import load_profile  # noqa: E402

SEEDS = (0, 1, 2, 7, 1000, 1003)


def test_same_seed_same_landscape():
    assert gen.make_landscape(5) == gen.make_landscape(5)
    assert gen.make_landscape(5) != gen.make_landscape(6)


@pytest.mark.parametrize("seed", SEEDS)
def test_written_landscape_loads_passes_the_flag_check_and_its_baseline_runs(tmp_path, seed):
    profile_path, space_path = gen.write_landscape(seed, tmp_path)
    profile, spec = load_profile(profile_path), load_spec(space_path)
    assert profile.sglang_version == "0.5.23" and spec.engine == "sglang"
    sampled = [p for p in spec.space.params.values() if p.sampled]
    assert 6 <= len(sampled) <= 14
    report = check_flags(spec, parse_help(build_parser(profile.sglang_version).format_help()))
    assert not report.errors and not report.warnings, report
    probe = spec.probe
    base = predict(profile, flag_argv(spec.space.config(spec.space.baseline).flags), probe.concurrency[0],
                   probe.input_len, probe.output_len, num_requests=probe.requests)
    assert base.status == "ok", base.message
    assert spec.space.baseline and not spec.space.violations(spec.space.baseline)


def test_draws_cover_the_tables():
    """Over the training seeds: dense and MoE, GQA and MLA, NVLink and PCIe, 1 to 8 GPUs."""
    seen = [gen._hardware_and_model(random.Random(f"landscape-{s}-0")) for s in range(60)]
    assert {f.moe is None for _, f, *_ in seen} == {True, False}
    assert {f.attention for _, f, *_ in seen} == {"mha", "mla"}
    assert {g.link for g, *_ in seen} == {"nvlink", "pcie"}
    assert {count for *_, count in seen} == {1, 2, 4, 8}
    for gpu, family, dtype, need, count in seen:
        weights = family.params_b * 1e9 * gen.DTYPES[dtype][0] / gen.GiB
        assert weights / need < gpu.memory_gb and need <= count <= 8  # the model fits on the GPUs drawn


def test_every_backend_in_the_tables_is_a_choice_of_the_flag():
    help_flags = parse_help(build_parser(gen.SGLANG_VERSION).format_help()).flags
    assert set(gen.ATTENTION) <= set(help_flags["attention-backend"])
    assert set(gen.MOE_RUNNERS) <= set(help_flags["moe-runner-backend"])
