"""SGLang's HTTP API on top of the simulated scheduler: native endpoints and the OpenAI-compatible ones."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
import uuid
from pathlib import Path
from typing import Any, AsyncIterator

from . import _openai
from ._engine import Crash, _ILLEGAL_ACCESS
from ._events import mark
from ._http import HttpError, HttpRequest, Response, StreamingResponse, dumps, json_response
from ._requests import GenRequest, Sampling
from ._server import Group, SimServer
from ._text import apply_chat_template

NOT_FOUND = json_response({"detail": "Not Found"}, 404)
FLUSH_TEXT = (b"Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting "
              b"requests, the operation will not be performed.)\n")


class BadRequest(HttpError):
    def __init__(self, message: str) -> None:
        super().__init__(400, message)


class Item:
    """One prompt of a request, parsed."""

    def __init__(self, ids: list[int], text: str | None, sampling: Sampling, return_logprob: bool,
                 logprob_start_len: int, top_logprobs_num: int, text_in_logprobs: bool) -> None:
        self.ids, self.text, self.sampling = ids, text, sampling
        self.return_logprob, self.logprob_start_len = return_logprob, logprob_start_len
        self.top_logprobs_num, self.text_in_logprobs = top_logprobs_num, text_in_logprobs


class Api:
    def __init__(self, server: SimServer) -> None:
        self.s = server
        self.rng = random.Random(f"http500|{server.seed}")
        self.routes = {
            "/health": self.health, "/health_generate": self.health, "/ready": self.ready,
            "/model_info": self.model_info, "/get_model_info": self.model_info,
            "/server_info": self.server_info, "/get_server_info": self.server_info,
            "/v1/models": self.models, "/flush_cache": self.flush_cache, "/generate": self.generate,
            "/v1/completions": self.completions, "/v1/chat/completions": self.chat,
            "/tokenize": self.tokenize, "/v1/tokenize": self.tokenize,
        }
        self.post_only = {"/generate", "/v1/completions", "/v1/chat/completions", "/tokenize", "/v1/tokenize"}
        self.get_only = {"/model_info", "/get_model_info", "/server_info", "/get_server_info", "/v1/models",
                         "/health", "/health_generate", "/ready"}

    async def __call__(self, http: HttpRequest) -> Response | StreamingResponse:
        if self.s.frozen:
            await self.s.forever.wait()
        handler = self.routes.get(http.path)
        if handler is None or (http.path == "/ready" and self.s.version == "0.5.6"):
            return NOT_FOUND
        if (http.path in self.post_only and http.method != "POST") or \
                (http.path in self.get_only and http.method not in ("GET", "HEAD")):
            return json_response({"detail": "Method Not Allowed"}, 405)
        key = self.s.args.get("api_key")
        if key and not http.path.startswith("/health") and not http.path.startswith("/metrics") \
                and http.headers.get("authorization") != f"Bearer {key}":
            return json_response({"error": "Unauthorized"}, 401)
        try:
            return await handler(http)
        except BadRequest as exc:
            if http.path.startswith("/v1/"):
                return json_response({"object": "error", "message": str(exc), "type": "BadRequestError",
                                      "param": None, "code": 400}, 400)
            return json_response({"error": {"message": str(exc)}}, 400)

    # -- status endpoints -------------------------------------------------------------------------------------

    async def health(self, http: HttpRequest) -> Response:
        """SGLang's /health and /health_generate, one handler (entrypoints/http_server.py, health_generate,
        0.5.6 and 0.5.23): 503 while starting; /health answers at once only with
        SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 (on by default). Otherwise a one-token generation (input
        id 0) is queued like any request, and the handler sleeps a second (wall time: here scaled by the time
        scale), then answers 200 once the server produced anything since, else sleeps again, up to
        SGLANG_HEALTH_CHECK_TIMEOUT (20) seconds: then it logs the failure and answers 503."""
        if not self.s.ready:
            return Response(503, b"", "text/plain")
        if http.path == "/health" and os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "1").lower() \
                in ("0", "false"):
            return Response(200, b"", "text/plain")
        item = Item([0], None, Sampling(max_new_tokens=1, temperature=0.0), False, -1, 0, False)
        task = asyncio.ensure_future(self._run(item))
        timeout = int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
        try:
            for _ in range(timeout):
                if self.s.scale > 0:
                    await asyncio.sleep(self.s.scale)
                else:  # as fast as possible: no sleep, only the generation's own time
                    await asyncio.wait({task}, timeout=1.0)
                # SGLang's test: any output received since (tokenizer_manager.last_receive_tstamp). A busy
                # scheduler streams some; an idle one has answered the health request by now.
                if task.done() or any(not g.scheduler.idle for g in self.s.groups):
                    return Response(200, b"", "text/plain")
            self.s.log.main(f"Health check failed. Server couldn't get a response from detokenizer for last "
                            f"{timeout} seconds.")
            return Response(503, b"", "text/plain")
        finally:
            task.cancel()

    async def ready(self, http: HttpRequest) -> Response:
        return Response(200 if self.s.ready else 503, b"", "text/plain")

    async def model_info(self, http: HttpRequest) -> Response:
        """SGLang's /model_info (entrypoints/http_server.py, model_info): 0.5.23 adds the served name, the
        load format, the parsers and the HF config's model_type and architectures (from the model path's
        config.json where there is one, as SGLang reads them, else from the profile)."""
        a = self.s.args
        if self.s.version == "0.5.6":
            return json_response({"model_path": a.get("model_path"), "tokenizer_path": a.get("tokenizer_path"),
                                  "is_generation": True, "preferred_sampling_params": None,
                                  "weight_version": "default", "has_image_understanding": False,
                                  "has_audio_understanding": False})
        model = self.s.profile.model
        hf = _hf_config(str(a.get("model_path") or ""))
        return json_response({
            "model_path": a.get("model_path"), "served_model_name": a.get("served_model_name"),
            "tokenizer_path": a.get("tokenizer_path"), "is_generation": True,
            "preferred_sampling_params": a.get("preferred_sampling_params"), "weight_version": "default",
            "load_format": a.get("load_format"), "reasoning_parser": a.get("reasoning_parser"),
            "tool_call_parser": a.get("tool_call_parser"), "disaggregation_mode": a.get("disaggregation_mode"),
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": hf.get("model_type", model.hf_model_type),
            "architectures": hf.get("architectures", [model.architecture])})

    async def server_info(self, http: HttpRequest) -> Response:
        """SGLang's /server_info: every resolved ServerArgs field, the scheduler's handshake (status,
        max_total_num_tokens, max_req_input_len), internal_states per DP rank and the version; 0.5.23 adds
        `launch_command` (the command line as given), `startup_time` (seconds per start-up stage),
        `kv_events` and `frontend` (utils/common.py build_server_info; entrypoints/http_server.py)."""
        mem, knobs = self.s.setup.memory, self.s.knobs
        states = []
        for g in self.s.groups:
            states.append({
                "attention_backend": self.s.args.get("attention_backend"),
                "last_gen_throughput": g.scheduler.stats.last_gen_throughput,
                "memory_usage": {"weight": round(mem.weights_gb, 2), "kvcache": round(mem.kv_pool_gb, 2),
                                 "token_capacity": mem.kv_tokens, "graph": round(mem.graph_mem_gb, 2)},
                "effective_max_running_requests_per_dp": mem.max_running_requests,
                "cuda_graph": knobs.cuda_graph,
            })
        info = dict(self.s.args)
        info.update({"status": "ready", "max_total_num_tokens": mem.kv_tokens,
                     "max_req_input_len": self.max_input_len(), "internal_states": states, "version": self.s.version})
        if self.s.version != "0.5.6":
            phases = self.s.setup.phases
            graphs = dict.fromkeys(("prefill", "decode", "target_verify", "draft_prefill", "draft_decode",
                                    "draft_extend"), 0.0)
            graphs["decode"] = phases.capture_s if knobs.cuda_graph else 0.0
            info.update({"launch_command": " ".join(sys.argv[1:]), "kv_events": None, "frontend": "python",
                         "startup_time": {"load_weight": phases.weight_load_s, "kv_cache_allocation": phases.kv_alloc_s,
                                          "scheduler_e2e": round(phases.total_s - phases.server_start_s, 6),
                                          "cuda_graph": graphs}})
        return json_response(info)

    async def models(self, http: HttpRequest) -> Response:
        name = self.s.args.get("served_model_name")
        return json_response({"object": "list", "data": [{
            "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
            "parent": None, "max_model_len": self.s.knobs.context_length}]})

    async def flush_cache(self, http: HttpRequest) -> Response:
        if any(not g.scheduler.idle for g in self.s.groups):
            return Response(400, FLUSH_TEXT, "text/plain; charset=utf-8")
        for g in self.s.groups:
            if g.cache is not None:
                g.cache.clear()
        self.s.log.sched("Cache flushed successfully!")
        return Response(200, FLUSH_TEXT, "text/plain; charset=utf-8")

    async def tokenize(self, http: HttpRequest) -> Response:
        """SGLang's /tokenize (entrypoints/openai/serving_tokenize.py): a prompt's ids with the tokenizer
        that /generate uses for text."""
        if self.s.faults.no_tokenize:
            return NOT_FOUND
        body = http.json()
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if prompt is None:
            raise BadRequest("prompt is required")
        prompts = prompt if isinstance(prompt, list) else [prompt]
        tokens = [self.s.tokenizer.encode(str(p)) for p in prompts]
        return json_response({"tokens": tokens if isinstance(prompt, list) else tokens[0],
                              "count": [len(t) for t in tokens] if isinstance(prompt, list) else len(tokens[0]),
                              "max_model_len": self.s.knobs.context_length})

    def max_input_len(self) -> int:
        return min(self.s.knobs.context_length - 1, self.s.setup.memory.kv_tokens * max(1, self.s.knobs.attn_dp) - 1)

    # -- faults that hit generate requests --------------------------------------------------------------------

    async def _count(self) -> Response | None:
        s, f = self.s, self.s.faults
        s.request_count += 1
        n = s.request_count
        if f.stop_answering_after is not None and n > f.stop_answering_after:
            s.frozen = True  # accept connections, never answer again; the process stays alive
            mark("frozen")
            await s.forever.wait()
        if f.crash_after_requests is not None and n > f.crash_after_requests:
            for g in s.groups:
                g.scheduler.crash_pending = Crash("crash_under_load", _ILLEGAL_ACCESS)
                g.wake.set()
        if f.log_burst > 0 and s.ready and not s.burst_done:
            s.burst_done = True
            mark("log_burst")
            s.log.burst(int(f.log_burst * 1e6))
        if f.generate_hang and s.ready:
            mark("generate_hang")
            await s.forever.wait()
        if f.response_delay > 0:
            await asyncio.sleep(f.response_delay)
        if f.http_500_rate > 0 and s.ready and self.rng.random() < f.http_500_rate:
            mark("http_500")
            if f.request_tracebacks:
                self.s.log.raw(request_traceback("RuntimeError: the response could not be encoded"))
            return Response(500, b"Internal Server Error", "text/plain; charset=utf-8")
        return None

    # -- running requests -------------------------------------------------------------------------------------

    def _check_length(self, item: Item) -> None:
        ctx = self.s.knobs.context_length
        n = len(item.ids)
        if n >= ctx:
            raise BadRequest(f"The input ({n} tokens) is longer than the model's context length ({ctx} tokens).")
        if n + item.sampling.max_new_tokens > ctx:
            raise BadRequest(
                f"Requested token count exceeds the model's maximum context length of {ctx} tokens. You requested "
                f"a total of {n + item.sampling.max_new_tokens} tokens: {n} tokens from the input messages and "
                f"{item.sampling.max_new_tokens} tokens for the completion. Please reduce the number of tokens in "
                "the input messages or the completion to fit within the limit.")
        if n > self.max_input_len():
            raise BadRequest(f"Input length ({n} tokens) exceeds the maximum allowed length "
                             f"({self.max_input_len()} tokens). Use a shorter input or enable "
                             "--allow-auto-truncate.")

    def _start(self, item: Item) -> tuple[GenRequest, Group, asyncio.Event]:
        event = asyncio.Event()
        req, group = self.s.new_request(item.ids, item.sampling, prompt_text=item.text,
                                        return_logprob=item.return_logprob, logprob_start_len=item.logprob_start_len,
                                        top_logprobs_num=item.top_logprobs_num, notify=event.set)
        req.with_text = item.text_in_logprobs
        self.s.submit(req, group)
        return req, group, event

    async def _run(self, item: Item) -> GenRequest:
        req, group, event = self._start(item)
        try:
            while not req.done:
                await event.wait()
                event.clear()
        except asyncio.CancelledError:
            self.s.abort(req, group)
            raise
        return req

    async def _events(self, item: Item) -> AsyncIterator[GenRequest]:
        """Yields the request each time it has new output to stream; aborts it if the client goes away."""
        req, group, event = self._start(item)
        req.streamed = True
        sent = -1
        try:
            while True:
                await event.wait()
                event.clear()
                if req.n_out != sent or req.done:
                    sent = req.n_out
                    yield req
                if req.done:
                    return
        finally:
            if not req.done:
                self.s.abort(req, group)
                if self.s.faults.request_tracebacks:
                    self.s.log.raw(request_traceback("ConnectionResetError: [Errno 104] Connection reset by peer"))

    # -- /generate --------------------------------------------------------------------------------------------

    def _sampling(self, params: Any, default_max: int | None = 128) -> Sampling:
        params = params or {}
        if not isinstance(params, dict):
            raise BadRequest("sampling_params must be an object")
        temperature = float(params.get("temperature", 1.0) if params.get("temperature") is not None else 1.0)
        if temperature < 0:
            raise BadRequest(f"temperature must be non-negative, got {temperature}.")
        max_new = params.get("max_new_tokens", default_max)
        if max_new is None:
            max_new = 2048
        max_new = int(max_new)
        if max_new < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
        stop = params.get("stop") or ()
        if isinstance(stop, str):
            stop = (stop,)
        return Sampling(max_new_tokens=max_new, temperature=temperature, top_p=float(params.get("top_p", 1.0)),
                        top_k=int(params.get("top_k", -1)), stop=tuple(stop),
                        stop_token_ids=tuple(params.get("stop_token_ids") or ()),
                        ignore_eos=bool(params.get("ignore_eos", False)),
                        seed=params.get("sampling_seed", params.get("seed")))

    def _generate_items(self, body: dict[str, Any]) -> tuple[list[Item], bool]:
        text, ids = body.get("text"), body.get("input_ids")
        if text is None and ids is None:
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        if text is not None and ids is not None:
            raise BadRequest("Either text or input_ids should be provided.")
        tok = self.s.tokenizer
        if text is not None:
            batch = isinstance(text, list)
            prompts = [(tok.encode(t), t) for t in (text if batch else [text])]
        else:
            batch = bool(ids) and isinstance(ids[0], list)
            prompts = [(list(map(int, p)), None) for p in (ids if batch else [ids])]
        params = body.get("sampling_params") or {}
        param_list = params if isinstance(params, list) else [params] * len(prompts)
        lp = body.get("return_logprob", False)
        lp_list = lp if isinstance(lp, list) else [lp] * len(prompts)
        start = body.get("logprob_start_len", -1)
        start_list = start if isinstance(start, list) else [start] * len(prompts)
        top = body.get("top_logprobs_num", 0)
        top_list = top if isinstance(top, list) else [top] * len(prompts)
        items = []
        for i, (pids, ptext) in enumerate(prompts):
            sampling = self._sampling(param_list[i])
            n = int((param_list[i] or {}).get("n", 1) or 1)
            for _ in range(n):
                item = Item(pids, ptext, sampling, bool(lp_list[i]), int(start_list[i] if start_list[i] is not None
                                                                          else -1),
                            int(top_list[i] or 0), bool(body.get("return_text_in_logprobs", False)))
                self._check_length(item)
                items.append(item)
            batch = batch or n > 1
        return items, batch

    def _triples(self, values: list[float | None] | None, ids: list[int], with_text: bool) -> list[list[Any]]:
        if values is None:
            return []
        piece = self.s.tokenizer.piece
        return [[v, t, piece(t) if with_text else None] for v, t in zip(values, ids)]

    def _tops(self, tops: list[Any] | None, with_text: bool) -> list[Any]:
        if tops is None:
            return []
        piece = self.s.tokenizer.piece
        return [None if entry is None else [[v, t, piece(t) if with_text else None] for v, t in entry]
                for entry in tops]

    def _generate_obj(self, req: GenRequest, item: Item, index: int | None = None) -> dict[str, Any]:
        meta = _meta_head(req)
        if item.return_logprob:
            start = len(req.prompt_ids) if item.logprob_start_len < 0 else min(item.logprob_start_len,
                                                                               len(req.prompt_ids))
            with_text = item.text_in_logprobs
            if not (self.s.faults.no_input_logprobs and item.text is not None):
                meta["input_token_logprobs"] = self._triples(req.in_logprobs, req.prompt_ids[start:], with_text)
            meta["output_token_logprobs"] = self._triples(req.out_logprobs, req.out_ids, with_text)
            if item.top_logprobs_num:
                meta["input_top_logprobs"] = self._tops(req.in_top, with_text)
                meta["output_top_logprobs"] = self._tops(req.out_top, with_text)
        meta.update(_meta_tail(req))
        obj: dict[str, Any] = {"text": req.text, "output_ids": list(req.out_ids), "meta_info": meta}
        if index is not None:
            obj["index"] = index
        return obj

    def _generate_bytes(self, req: GenRequest, item: Item, index: int | None = None) -> bytes:
        """`_generate_obj` encoded, assembled from the request's pre-encoded fragments where possible."""
        stop = req.finish.get("matched") if req.finish else None
        if item.top_logprobs_num or (isinstance(stop, str) and stop != "NaN happened"):
            return dumps(self._generate_obj(req, item, index))
        meta = {**_meta_head(req), **_meta_tail(req)}
        parts = [b'{"text":"', bytes(req.text_json), b'","output_ids":[', bytes(req.ids_json[:-1]),
                 b'],"meta_info":', dumps(meta)[:-1]]
        if item.return_logprob:
            if req.in_json is None and (req.in_logprobs is not None or item.logprob_start_len < 0):
                start = len(req.prompt_ids) if item.logprob_start_len < 0 else item.logprob_start_len
                req.in_json = dumps(self._triples(req.in_logprobs or [], req.prompt_ids[start:],
                                                  item.text_in_logprobs))
            parts += [b',"input_token_logprobs":', req.in_json or b"[]",
                      b',"output_token_logprobs":[', bytes(req.lp_json[:-1]), b"]"]
        parts.append(b"}")
        if index is not None:
            parts.append(b',"index":%d' % index)
        parts.append(b"}")
        return b"".join(parts)

    async def generate(self, http: HttpRequest) -> Response | StreamingResponse:
        body = http.json()
        if not isinstance(body, dict):
            raise BadRequest("request body must be a JSON object")
        try:
            items, batch = self._generate_items(body)
        except BadRequest as exc:
            if not body.get("stream"):
                raise
            # SGLang validates a streamed request inside the response generator (tokenizer_manager): the
            # answer is HTTP 200, then an error event, then [DONE] (entrypoints/http_server.py).
            return StreamingResponse(self._stream_error(str(exc)))
        refused = await self._count()
        if refused is not None:
            return refused
        if body.get("stream"):
            return StreamingResponse(self._stream_generate(items, batch))
        reqs = await asyncio.gather(*(self._run(item) for item in items))
        out = [self._generate_obj(r, item) for r, item in zip(reqs, items)]
        for r in reqs:
            if r.aborted:
                return json_response({"error": {"message": "The request was aborted."}}, 400)
        return json_response(out if batch else out[0])

    async def _stream_error(self, message: str) -> AsyncIterator[bytes]:
        yield b"data: " + dumps({"error": {"message": message, "type": "BadRequestError", "code": 400}}) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def _stream_generate(self, items: list[Item], batch: bool) -> AsyncIterator[bytes]:
        if len(items) == 1:
            item = items[0]
            fails = self.s.faults.stream_error_rate > 0 and self.rng.random() < self.s.faults.stream_error_rate
            async for req in self._events(item):
                if fails and req.n_out >= 1:
                    # The stream_error_rate fault: an error found after the response started.
                    mark("stream_error")
                    async for chunk in self._stream_error("Internal server error: the request failed mid-stream."):
                        yield chunk
                    return
                yield b"data: " + self._generate_bytes(req, item, 0 if batch else None) + b"\n\n"
        else:
            async for index, req in self._merged(items):
                yield b"data: " + self._generate_bytes(req, items[index], index) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def _merged(self, items: list[Item]) -> AsyncIterator[tuple[int, GenRequest]]:
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(index: int, item: Item) -> None:
            try:
                async for req in self._events(item):
                    await queue.put((index, req))
            finally:
                await queue.put((index, None))

        tasks = [asyncio.ensure_future(pump(i, item)) for i, item in enumerate(items)]
        remaining = len(tasks)
        try:
            while remaining:
                index, req = await queue.get()
                if req is None:
                    remaining -= 1
                    continue
                yield index, req
        finally:
            for task in tasks:
                task.cancel()

    # -- OpenAI-compatible ------------------------------------------------------------------------------------

    def _openai_item(self, ids: list[int], text: str | None, body: dict[str, Any], logprobs: int | None,
                     echo: bool) -> Item:
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        params = {"max_new_tokens": max_tokens, "temperature": body.get("temperature", 1.0),
                  "top_p": body.get("top_p", 1.0), "top_k": body.get("top_k", -1), "stop": body.get("stop"),
                  "stop_token_ids": body.get("stop_token_ids"), "ignore_eos": body.get("ignore_eos", False),
                  "seed": body.get("seed")}
        if max_tokens is None and body.get("_default_max") is not None:
            params["max_new_tokens"] = body["_default_max"]
        item = Item(ids, text, self._sampling(params, default_max=None), logprobs is not None,
                    0 if echo and logprobs is not None else -1, int(logprobs or 0), False)
        self._check_length(item)
        return item

    async def completions(self, http: HttpRequest) -> Response | StreamingResponse:
        body = http.json()
        prompt = body.get("prompt")
        if prompt is None:
            raise BadRequest("prompt is required")
        tok = self.s.tokenizer
        if isinstance(prompt, str):
            prompts = [(tok.encode(prompt), prompt)]
        elif prompt and isinstance(prompt[0], int):
            prompts = [(list(prompt), None)]
        elif prompt and isinstance(prompt[0], list):
            prompts = [(list(p), None) for p in prompt]
        else:
            prompts = [(tok.encode(p), p) for p in prompt]
        body = dict(body)
        body.setdefault("_default_max", 16)
        logprobs = body.get("logprobs")
        logprobs = None if logprobs is None or logprobs is False else int(logprobs)
        echo = bool(body.get("echo", False))
        n = int(body.get("n", 1) or 1)
        items = [self._openai_item(ids, text, body, logprobs, echo) for ids, text in prompts for _ in range(n)]
        refused = await self._count()
        if refused is not None:
            return refused
        model = body.get("model") or self.s.args.get("served_model_name")
        rid = f"cmpl-{uuid.uuid4().hex}"
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(self._stream_completion(items, rid, model, echo, include_usage))
        reqs = await asyncio.gather(*(self._run(item) for item in items))
        choices = []
        for i, req in enumerate(reqs):
            reason, matched = _openai.finish_fields(req)
            text = (tok.decode(req.prompt_ids) if echo else "") + req.text
            choices.append({"index": i, "text": text,
                            "logprobs": _openai.completion_logprobs(tok, req, echo) if logprobs is not None else None,
                            "finish_reason": reason, "matched_stop": matched})
        return json_response(_openai.completion_body(rid, model, choices, list(reqs)))

    async def _stream_completion(self, items: list[Item], rid: str, model: str, echo: bool,
                                 include_usage: bool) -> AsyncIterator[bytes]:
        tok = self.s.tokenizer
        created = int(time.time())
        sent_tokens = [0] * len(items)
        finals: list[GenRequest | None] = [None] * len(items)
        source = self._merged(items) if len(items) > 1 else ((0, r) async for r in self._events(items[0]))
        async for index, req in source:
            delta = _delta(req, sent_tokens[index])
            if echo and sent_tokens[index] == 0:
                delta = tok.decode(req.prompt_ids) + delta
            reason, matched = _openai.finish_fields(req)
            logprobs = None
            if req.return_logprob:
                logprobs = _openai.completion_logprobs(tok, req, echo and sent_tokens[index] == 0,
                                                       start=sent_tokens[index])
            sent_tokens[index] = req.n_out
            chunk = {"id": rid, "object": "text_completion", "created": created, "model": model,
                     "choices": [{"index": index, "text": delta, "logprobs": logprobs, "finish_reason": reason,
                                  "matched_stop": matched}], "usage": None}
            yield b"data: " + dumps(chunk) + b"\n\n"
            if req.done:
                finals[index] = req
        if include_usage:
            done = [r for r in finals if r is not None]
            chunk = {"id": rid, "object": "text_completion", "created": created, "model": model, "choices": [],
                     "usage": _openai.usage(done[0].prompt_len if done else 0, sum(r.n_out for r in done))}
            yield b"data: " + dumps(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def chat(self, http: HttpRequest) -> Response | StreamingResponse:
        body = http.json()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        prompt = apply_chat_template(messages)
        tok = self.s.tokenizer
        ids = tok.encode(prompt, special=False)  # the template writes its own, as a real chat template does
        want_lp = bool(body.get("logprobs", False))
        top = int(body.get("top_logprobs") or 0)
        n = int(body.get("n", 1) or 1)
        items = [self._openai_item(ids, prompt, body, (max(top, 1) if want_lp else None), False) for _ in range(n)]
        for item in items:
            item.top_logprobs_num = top if want_lp else 0
        refused = await self._count()
        if refused is not None:
            return refused
        model = body.get("model") or self.s.args.get("served_model_name")
        rid = uuid.uuid4().hex
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(self._stream_chat(items, rid, model, include_usage))
        reqs = await asyncio.gather(*(self._run(item) for item in items))
        choices = []
        for i, req in enumerate(reqs):
            reason, matched = _openai.finish_fields(req)
            choices.append({"index": i, "message": {"role": "assistant", "content": req.text,
                                                    "reasoning_content": None, "tool_calls": None},
                            "logprobs": _openai.chat_logprobs(tok, req) if want_lp else None,
                            "finish_reason": reason, "matched_stop": matched})
        return json_response(_openai.chat_body(rid, model, choices, list(reqs)))

    async def _stream_chat(self, items: list[Item], rid: str, model: str, include_usage: bool) -> AsyncIterator[bytes]:
        tok = self.s.tokenizer
        created = int(time.time())
        sent_tokens = [0] * len(items)
        started = [False] * len(items)
        finals: list[GenRequest | None] = [None] * len(items)

        def chunk(index: int, delta: dict[str, Any], logprobs: Any, reason: Any, matched: Any) -> bytes:
            body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": reason,
                                 "matched_stop": matched}], "usage": None}
            return b"data: " + dumps(body) + b"\n\n"

        source = self._merged(items) if len(items) > 1 else ((0, r) async for r in self._events(items[0]))
        async for index, req in source:
            if not started[index]:
                started[index] = True
                yield chunk(index, {"role": "assistant", "content": ""}, None, None, None)
            reason, matched = _openai.finish_fields(req)
            logprobs = _openai.chat_logprobs(tok, req, start=sent_tokens[index]) if req.return_logprob else None
            delta = {"content": _delta(req, sent_tokens[index])}
            sent_tokens[index] = req.n_out
            yield chunk(index, delta, logprobs, reason, matched)
            if req.done:
                finals[index] = req
        if include_usage:
            done = [r for r in finals if r is not None]
            body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
                    "usage": _openai.usage(done[0].prompt_len if done else 0, sum(r.n_out for r in done))}
            yield b"data: " + dumps(body) + b"\n\n"
        yield b"data: [DONE]\n\n"


def _hf_config(model_path: str) -> dict[str, Any]:
    """The model folder's config.json, where it has one (the simulator needs none)."""
    try:
        return json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def _meta_head(req: GenRequest) -> dict[str, Any]:
    """The first fields of /generate's meta_info, as SGLang 0.5.23's tokenizer manager builds them
    (managers/tokenizer_manager.py, _handle_batch_output); the logprob fields, where asked, come next."""
    return {"id": req.rid, "finish_reason": req.finish, "prompt_tokens": req.prompt_len,
            "weight_version": "default", "num_retractions": 0}


def _meta_tail(req: GenRequest) -> dict[str, Any]:
    """The last fields: `e2e_latency` only once the request finished, and `response_sent_to_client_ts`
    (wall-clock time) only in the first response sent for it: a stream's first event, else the answer."""
    tail: dict[str, Any] = {"reasoning_tokens": 0, "completion_tokens": req.n_out, "cached_tokens": req.cached}
    if req.done:
        tail["e2e_latency"] = round((req.finished_wall or time.monotonic()) - req.created_wall, 6)
    if req.sent_ts is None:
        req.sent_ts = time.time()
        tail["response_sent_to_client_ts"] = req.sent_ts
    return tail


def _delta(req: GenRequest, sent: int) -> str:
    """Text of the tokens after the first `sent` ones (a stop string is cut from the final delta)."""
    delta = "".join(req.pieces[sent:])
    stop = req.finish.get("matched") if req.finish else None
    if isinstance(stop, str) and stop != "NaN happened" and stop in delta:
        delta = delta[: delta.rfind(stop)]
    return delta


def request_traceback(exc_line: str) -> str:
    """What uvicorn logs when one request's handler raises: the server goes on serving."""
    return ("ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/uvicorn/protocols/http/httptools_impl.py", line 409, '
            "in run_asgi\n    result = await app(  # type: ignore[func-returns-value]\n"
            '  File "/usr/local/lib/python3.12/dist-packages/starlette/responses.py", line 246, in stream_response\n'
            "    await send({\"type\": \"http.response.body\", \"body\": chunk, \"more_body\": True})\n"
            f"{exc_line}\n")
