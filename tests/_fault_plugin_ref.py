"""Run by the SGLang 0.5.17 reference environment's python (scripts/setup_sglang_ref.sh) with
scripts/sglang_faults first on PYTHONPATH and TUNER_FAULT set, never by the tuner's own: imports the module that
the fault patches from real SGLang, then drives the planted wrapper with real torch tensors and SGLang's own
ForwardMode and LogitsProcessorOutput, standing in only for the GPU forward pass that it wraps.
Prints one JSON line of what it saw (tests/test_fault_plugin.py judges it)."""

import importlib
import json
import os
import sys
from types import SimpleNamespace

import sitecustomize as faults  # the plugin, already run at start-up by this interpreter
import torch
from sglang.srt.layers.logits_processor import LogitsProcessorOutput
from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

fault = os.environ["TUNER_FAULT"]
module, cls, method = faults.FAULTS[fault]
wrapped = getattr(getattr(importlib.import_module(module), cls), method)
seen = {"planted": wrapped.__qualname__.endswith("wrapped")}

DECODE = SimpleNamespace(forward_mode=ForwardMode.DECODE)
EXTEND = SimpleNamespace(forward_mode=ForwardMode.EXTEND)

if fault in ("nan-decode-batch8", "batch-slot"):
    def forward(self, input_ids, hidden_states, lm_head, metadata, *args, **kwargs):
        return LogitsProcessorOutput(next_token_logits=torch.arange(float(hidden_states)).repeat(3, 1).T.clone())

    test = faults.WRAPPERS[fault](forward)  # a batch of `hidden_states` rows, row i's logits all i
    for batch in (1, 3, 4, 7, 8, 64):
        for name, metadata in (("decode", DECODE), ("extend", EXTEND)):
            got = test(None, None, batch, None, metadata).next_token_logits
            seen[f"{name}-{batch}"] = ("nan" if bool(torch.isnan(got).all()) else
                                       "rows" if got[:, 0].tolist() != list(map(float, range(batch))) else "same")
elif fault == "decode-position":
    positions = torch.tensor([5, 9])
    test = faults.WRAPPERS[fault](lambda self, ids, pos, batch, *a, **k: pos.tolist())
    seen["decode"] = test(None, None, positions, DECODE)
    seen["extend"] = test(None, None, positions, EXTEND)
elif fault == "chunk-kv":
    # Two sequences in one extend: the first new (no prefix), the second continuing after one whole chunk.
    values = torch.arange(12.0).reshape(12, 1, 1)
    pool = SimpleNamespace(get_value_buffer=lambda layer_id: values)
    # As in 0.5.17: the pool is the attention backend's (self.token_to_kv_pool), not the ForwardBatch's, whose
    # real class is checked to have no such field.
    seen["batch_has_pool"] = "token_to_kv_pool" in ForwardBatch.__dataclass_fields__
    batch = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_prefix_lens_cpu=[0, 2048],
                            extend_seq_lens_cpu=[3, 4], out_cache_loc=torch.tensor([0, 1, 2, 8, 9, 10, 11]))
    test = faults.WRAPPERS[fault](lambda self, q, k, v, layer, fb, save=True, **kw: "out")
    backend = SimpleNamespace(token_to_kv_pool=pool)
    seen["returned"] = test(backend, None, None, None, SimpleNamespace(layer_id=0), batch)
    seen["values"] = values.flatten().tolist()
    seen["chunk"] = faults._chunk_size()  # no server args in this process: every continued prefix counts
print(json.dumps(seen))
