"""Planted faults in real SGLang (0.5.17), for proving the tuner's gate on real kernels (issue 46).

Python runs `sitecustomize` from the first sys.path entry that has one, in every process: SGLang's server, its
scheduler and its detokenizer alike. Put this folder first on the server's PYTHONPATH (a space's `server.env`)
and name a fault in TUNER_FAULT (an upper-case space parameter is an environment variable, so one study can
plant a different fault in each trial). Without TUNER_FAULT, or with `none`, nothing is patched.

    server:
      env: {PYTHONPATH: /tmp/sglang-faults:/tmp/site}
    params:
      TUNER_FAULT: {type: categorical, choices: [none, nan-decode-batch8, ...]}

An import hook wraps one method of SGLang's model code right after SGLang imports its module. The wrapped code
runs inside SGLang's forward pass, so CUDA graphs capture it like the rest: a condition on the batch size is
decided per captured graph (its padded batch size), as a kernel chosen by batch size would be.

FAULTS names each fault, the method it wraps and what it does. Each one is a bug seen in real engines:
- nan-decode-batch8: NaN logits in decode at a (padded) batch of 8 and up (the seed: NaN only under load).
- decode-position: decode positions one too far (the sglang-jax bug behind the decode-vs-re-prefill check).
- chunk-kv: the V cache of every chunk after the first of a chunked prefill is read from the neighbouring slot
  (an offset bug): the chunk itself computes right, later chunks and decode read corrupt values.
- batch-slot: in decode at a (padded) batch of 4 and up each sequence gets its neighbour's logits (a graph
  captured with the wrong row order): alone, every answer is right.

The image's own sitecustomize, if any, still runs: the next one on sys.path is executed after this one.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

ENV = "TUNER_FAULT"
NAN_BATCH = 8  # nan-decode-batch8: from this padded decode batch size up
SLOT_BATCH = 4  # batch-slot: from this padded decode batch size up

# fault -> (module, class, method) that it wraps
FAULTS = {
    "nan-decode-batch8": ("sglang.srt.layers.logits_processor", "LogitsProcessor", "forward"),
    "decode-position": ("sglang.srt.models.llama", "LlamaModel", "forward"),
    "chunk-kv": ("sglang.srt.layers.attention.base_attn_backend", "AttentionBackend", "forward"),
    "batch-slot": ("sglang.srt.layers.logits_processor", "LogitsProcessor", "forward"),
}


def _say(text: str) -> None:
    print(f"tuner-fault[{os.getpid()}]: {text}", file=sys.stderr, flush=True)


# -- what each fault does to tensors (torch is imported by SGLang before any of these runs) -------------------

def nan_rows(logits, batch_from: int = NAN_BATCH):
    """All logits NaN when the batch has `batch_from` rows or more; else unchanged."""
    if logits is None or logits.shape[0] < batch_from:
        return logits
    return logits * float("nan")


def rotate_rows(logits, batch_from: int = SLOT_BATCH):
    """Each row gets the previous row's logits (row 0 the last one's) when the batch has `batch_from` rows or more."""
    if logits is None or logits.shape[0] < batch_from:
        return logits
    return logits.roll(1, dims=0)


def continued_spans(prefix_lens, seq_lens, chunk: int | None) -> list[tuple[int, int]]:
    """(start, end) rows of out_cache_loc that continue a chunked prefill: a sequence whose cached prefix is a
    whole number of chunks (> 0). A prefix-cache hit elsewhere is left alone."""
    spans, start = [], 0
    for prefix, length in zip(prefix_lens, seq_lens):
        if prefix > 0 and (not chunk or prefix % chunk == 0) and length > 1:
            spans.append((start, start + length))
        start += length
    return spans


def shift_values(value_buffer, locs) -> None:
    """The V rows at `locs` become their predecessor's (in `locs` order): keys still match, values come from the
    neighbouring token."""
    value_buffer[locs] = value_buffer[locs.roll(1, dims=0)]


# -- the wrappers --------------------------------------------------------------------------------------------

def _is_decode(metadata) -> bool:
    mode = getattr(metadata, "forward_mode", None)
    return mode is not None and mode.is_decode()


def _wrap_logits(forward, transform):
    def wrapped(self, input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs):
        decode = _is_decode(logits_metadata)  # read before SGLang converts a ForwardBatch
        out = forward(self, input_ids, hidden_states, lm_head, logits_metadata, *args, **kwargs)
        if decode and getattr(out, "next_token_logits", None) is not None:
            out.next_token_logits = transform(out.next_token_logits)
        return out
    return wrapped


def _wrap_positions(forward):
    def wrapped(self, input_ids, positions, forward_batch, *args, **kwargs):
        if _is_decode(forward_batch):
            positions = positions + 1
        return forward(self, input_ids, positions, forward_batch, *args, **kwargs)
    return wrapped


def _chunk_size() -> int | None:
    try:
        from sglang.srt.server_args import get_global_server_args

        size = get_global_server_args().chunked_prefill_size
    except Exception:  # noqa: BLE001 - older or newer SGLang: every continued prefix counts
        return None
    return size if size and size > 0 else None


def _wrap_chunk_kv(forward):
    def wrapped(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        out = forward(self, q, k, v, layer, forward_batch, save_kv_cache, **kwargs)
        mode = forward_batch.forward_mode
        if save_kv_cache and mode.is_extend() and forward_batch.extend_prefix_lens_cpu is not None:
            spans = continued_spans(forward_batch.extend_prefix_lens_cpu, forward_batch.extend_seq_lens_cpu,
                                    _chunk_size())
            if spans:
                # 0.5.17 keeps the pool on the backend (flashinfer_backend.py and the others: self.token_to_kv_pool);
                # its ForwardBatch has none (the first GPU run failed there: AttributeError, 2026-12-08).
                pool = getattr(self, "token_to_kv_pool", None) or forward_batch.token_to_kv_pool
                values = pool.get_value_buffer(layer.layer_id)
                for start, end in spans:
                    shift_values(values, forward_batch.out_cache_loc[start:end])
        return out
    return wrapped


WRAPPERS = {
    "nan-decode-batch8": lambda f: _wrap_logits(f, nan_rows),
    "decode-position": _wrap_positions,
    "chunk-kv": _wrap_chunk_kv,
    "batch-slot": lambda f: _wrap_logits(f, rotate_rows),
}


# -- the import hook -----------------------------------------------------------------------------------------

class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds the target module with the other finders, then wraps the target method once the module has run."""

    def __init__(self, fault: str):
        self.fault = fault
        self.module, self.cls, self.method = FAULTS[fault]

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.module:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_patch(module, _exec=exec_module):
                    _exec(module)
                    self.patch(module)

                spec.loader.exec_module = exec_and_patch
                return spec
        return None

    def patch(self, module) -> None:
        cls = getattr(module, self.cls)
        setattr(cls, self.method, WRAPPERS[self.fault](getattr(cls, self.method)))
        _say(f"{self.fault} planted in {self.module}.{self.cls}.{self.method}")


def install(fault: str | None) -> None:
    """Plant `fault` (None or 'none': nothing). An unknown name stops the process: a trial must never run
    healthy while it is recorded as faulty."""
    if not fault or fault == "none":
        return
    if fault not in FAULTS:
        # One line and out: SystemExit here would become a fatal "Failed to import the site module" traceback.
        print(f"tuner-fault: unknown fault {fault!r} in {ENV}; use one of: none, {', '.join(FAULTS)}",
              file=sys.stderr, flush=True)
        os._exit(2)
    if FAULTS[fault][0] in sys.modules:
        _PatchAfterImport(fault).patch(sys.modules[FAULTS[fault][0]])
    else:
        sys.meta_path.insert(0, _PatchAfterImport(fault))


def _run_next_sitecustomize() -> None:
    """Execute the sitecustomize that this one shadows (a distribution's own), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", candidate)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            return


install(os.environ.get(ENV))
_run_next_sitecustomize()
