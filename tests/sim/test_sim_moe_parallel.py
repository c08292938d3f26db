"""Expert parallelism and DP attention in the physics: what ep and attn_dp cost and save, via predict()."""

from __future__ import annotations

import dataclasses

import pytest

from tuner.sim import load_profile, predict
from tuner.sim._model import weight_split
from tuner.sim._profile import Moe, Profile
from tuner.sim._setup import make_setup

WORK = dict(concurrency=256, input_len=512, output_len=64)
EP8_A2A = ("--ep-size", "8", "--moe-a2a-backend", "deepep")  # tokens travel by all-to-all


def moe_profile(interconnect_gbs: float = 380.0, slice_efficiency: float = 1.0) -> Profile:
    """The 70B-on-8xH200 twin turned into a Mixtral-like MoE (most weights in 8 experts, top 2)."""
    base = load_profile("llama3-70b-8xh200")
    model = dataclasses.replace(base.model, architecture="MixtralForCausalLM", active_params_b=20.0,
                                moe=Moe(experts=8, top_k=2, expert_weight_fraction=0.85))
    hw = dataclasses.replace(base.hardware, interconnect_bandwidth_gbs=interconnect_gbs)
    perf = dataclasses.replace(base.performance, moe_slice_efficiency=slice_efficiency)
    return dataclasses.replace(base, model=model, hardware=hw, performance=perf)


def _setup(profile: Profile, *argv: str):
    from tuner.sim import server_values as _values
    return make_setup(profile, _values(profile, ["--tp-size", "8", *argv]))


def test_expert_bytes_per_gpu_do_not_depend_on_ep():
    # ep ranks split the tp group (moe_tp = tp / ep): whole experts or slices, a GPU holds 1/tp of them.
    profile = moe_profile()
    plain, ep8 = _setup(profile), _setup(profile, "--ep-size", "8")
    assert weight_split(profile, ep8.resolved.knobs) == weight_split(profile, plain.resolved.knobs)
    assert ep8.memory.kv_tokens == plain.memory.kv_tokens


def test_all_to_all_cost_follows_the_interconnect():
    nvlink, pcie = _setup(moe_profile(380.0), *EP8_A2A), _setup(moe_profile(12.0), *EP8_A2A)
    assert _setup(moe_profile(), "--ep-size", "1").perf.alltoall_s(4096) == 0.0
    # Without an a2a backend SGLang's EP MoE combines by all-reduce, as TP MoE does: no all-to-all.
    assert _setup(moe_profile(), "--ep-size", "8").perf.alltoall_s(4096) == 0.0
    small, large = nvlink.perf.alltoall_s(1), nvlink.perf.alltoall_s(8192)
    assert large > 2 * small  # bytes: tokens x hidden x top_k
    assert pcie.perf.alltoall_s(8192) > 10 * large  # over 32x less bandwidth


def test_ep_costs_at_small_batches_and_pays_at_large_ones():
    profile = moe_profile(12.0)  # PCIe: the all-reduce the all-to-all replaces is dear
    one = dict(concurrency=1, input_len=512, output_len=64)
    tp, ep = predict(profile, ["--tp-size", "8"], **one), predict(profile, ["--tp-size", "8", *EP8_A2A], **one)
    assert ep.itl_s > tp.itl_s  # two latencies per layer instead of one
    tp, ep = (predict(profile, ["--tp-size", "8"], **WORK), predict(profile, ["--tp-size", "8", *EP8_A2A], **WORK))
    assert ep.output_tok_s > tp.output_tok_s  # 1/tp of the tokens, top_k copies, instead of a full all-reduce
    plain_ep = predict(profile, ["--tp-size", "8", "--ep-size", "8"], **WORK)
    assert plain_ep.output_tok_s == tp.output_tok_s  # all-reduce either way, whole experts cost nothing here


def test_whole_experts_beat_thin_slices_where_slicing_costs():
    profile = moe_profile(380.0, slice_efficiency=0.75)
    sliced = predict(profile, ["--tp-size", "8"], **WORK)
    whole = predict(profile, ["--tp-size", "8", "--ep-size", "8"], **WORK)
    assert whole.output_tok_s > 1.05 * sliced.output_tok_s


def test_dp_attention_charges_replicated_attention_weights():
    profile = moe_profile()
    plain = _setup(profile)
    dpa = _setup(profile, "--dp-size", "8", "--enable-dp-attention")
    assert dpa.resolved.knobs.attn_dp == 8
    before, after = weight_split(profile, plain.resolved.knobs), weight_split(profile, dpa.resolved.knobs)
    assert after.expert_gb == before.expert_gb
    assert after.dense_gb == pytest.approx(8 * before.dense_gb)  # no replicated part in this model
    assert dpa.memory.weights_gb > plain.memory.weights_gb and dpa.memory.kv_pool_gb < plain.memory.kv_pool_gb
    # ... and reads: one request alone decodes slower with 8 copies of the attention weights to stream.
    assert dpa.perf.decode_s(1, 1000)[0] > plain.perf.decode_s(1, 1000)[0]


def test_shipped_dense_profiles_unchanged_by_ep():
    profile = load_profile("llama3-70b-8xh200")
    a = predict(profile, ["--tp-size", "8"], **WORK)
    b = predict(profile, ["--tp-size", "8", "--ep-size", "8"], **WORK)
    assert a.output_tok_s == b.output_tok_s  # no experts: nothing to split or exchange
