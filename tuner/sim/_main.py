"""`python -m tuner.sim`: SGLang's launch_server command line, the simulator's settings from the environment.

Environment: TUNER_SIM_PROFILE (name or path), TUNER_SIM_TIME_SCALE, TUNER_SIM_STARTUP_SCALE, TUNER_SIM_SEED, TUNER_SIM_FAULTS and
CUDA_VISIBLE_DEVICES. The command line itself is exactly the emulated SGLang version's, so `--help`, unknown
flags and bad choices behave as they would there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from ..flags import parse_argv
from ._events import mark
from ._faults import Faults, parse_faults, planted_health
from ._http import HttpRequest, HttpServer
from ._log import SGLANG_ROOT, Log
from ._profile import DEFAULT_PROFILE, Profile, ProfileError, load_profile
from ._requests import Sampling
from ._setup import make_setup


def _visible_gpus() -> int | None:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return len([v for v in value.split(",") if v.strip() and v.strip() != "-1"])


def _server_args_repr(values: dict[str, Any]) -> str:
    inner = ", ".join(f"{k}={v!r}" for k, v in values.items() if k != "cuda_graph_config")
    return f"server_args=ServerArgs({inner})"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ
    try:
        profile = load_profile(env.get("TUNER_SIM_PROFILE") or DEFAULT_PROFILE)
        faults = parse_faults(env.get("TUNER_SIM_FAULTS"), profile.faults)
        planted = planted_health(env.get("TUNER_FAULT"))
    except (ProfileError, ValueError) as exc:
        print(f"tuner.sim: {exc}", file=sys.stderr)
        sys.exit(2)
    mark("start", cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"))
    if faults.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # argparse prints and exits 2 on bad input; `--help` is answered here, before any start-up fault (the flag
    # check reads it, and SGLang's own parser answers it before starting anything).
    values = parse_argv(argv, profile.sglang_version)
    if faults.slow_start_no_log > 0:
        mark("silent_start")
        time.sleep(faults.slow_start_no_log)
    if profile.sglang_version != "0.5.6":
        print(f"{SGLANG_ROOT}/launch_server.py:72: UserWarning: 'python -m sglang.launch_server' is still "
              "supported, but 'sglang serve' is the recommended entrypoint.\n  Example: sglang serve --model-path "
              "<model> [options]\n  warnings.warn(", file=sys.stderr, flush=True)
    if profile.require_model_path and not Path(values["model_path"]).exists():
        raise OSError(f"{values['model_path']} is not a local folder and is not a valid model identifier listed "
                      "on 'https://huggingface.co/models'")
    scale = float(env["TUNER_SIM_TIME_SCALE"]) if env.get("TUNER_SIM_TIME_SCALE") else profile.time_scale
    seeded = "TUNER_SIM_SEED" in env
    seed = int(env.get("TUNER_SIM_SEED") or 0)
    # An explicit seed makes the run reproducible; without one every start draws fresh noise, so that
    # re-measuring a configuration gives a different value, as on real hardware.
    nonce = "" if seeded else f"{os.getpid()}-{time.time_ns()}"
    # TUNER_FAULT (a fault of scripts/sglang_faults) joins the switches: its NaN batch as theirs (the profile's own
    # stays where it is lower), the rest as health fields.
    nan_batches = [b for b in (faults.nan_when_batch_over, planted.pop("nan_when_batch_over", None)) if b is not None]
    setup = make_setup(profile, values, seed=seed, nonce=nonce, visible_gpus=_visible_gpus(),
                       extra_nan_batch=min(nan_batches, default=None))
    health: dict[str, Any] = {}
    if faults.batch_slot_error is not None or faults.chunk_kv_error:
        health.update(batch_slot_error=faults.batch_slot_error, chunk_kv_error=faults.chunk_kv_error)
    health.update(planted)  # TUNER_FAULT's fields over TUNER_SIM_FAULTS's
    if health:
        setup = dataclasses.replace(setup, health=dataclasses.replace(setup.health, **health))
    try:
        asyncio.run(_serve(profile, setup, values, faults, scale, seed))
    except KeyboardInterrupt:
        pass


async def _serve(profile: Profile, setup, values: dict[str, Any], faults: Faults, scale: float, seed: int) -> None:
    from ._routes import Api, Item
    from ._server import SimServer

    knobs = setup.resolved.knobs
    prefix = " DP0 TP0" if knobs.attn_dp > 1 or knobs.dp > 1 else " TP0"
    log = Log(scheduler_prefix=prefix, http_level=str(values.get("log_level_http") or values.get("log_level") or "info"))
    server = SimServer(profile, setup, values, faults, scale, seed, log)
    loop = asyncio.get_running_loop()

    def shutdown() -> None:
        if server.up:
            log.uvicorn("Shutting down")
            log.uvicorn("Waiting for application shutdown.")
            log.uvicorn("Application shutdown complete.")
            log.uvicorn(f"Finished server process [{os.getpid()}]")
        sys.stdout.flush()
        if faults.slow_exit > 0:
            mark("slow_exit")
            loop.remove_signal_handler(signal.SIGTERM)  # a second SIGTERM changes nothing; SIGKILL still ends it
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            loop.call_later(faults.slow_exit, os._exit, 0)
            return
        os._exit(0)

    if not faults.ignore_sigterm:
        loop.add_signal_handler(signal.SIGTERM, shutdown)
    loop.add_signal_handler(signal.SIGINT, shutdown)

    for line in setup.resolved.log:
        log.main(line)
    log.main(_server_args_repr(setup.resolved.args))
    if setup.failure is not None and setup.failure.stage == "args":
        # ServerArgs.__post_init__ raises in the launcher itself: a plain traceback, exit status 1.
        sys.stdout.flush()
        print("Traceback (most recent call last):\n  File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
              "  File \"/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py\", line 24, in <module>\n"
              "    server_args = prepare_server_args(sys.argv[1:])\n" + setup.failure.exc_line,
              file=sys.stderr, flush=True)
        os._exit(1)

    await server.start()

    host, port = values.get("host") or "127.0.0.1", int(values.get("port") or 30000)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets made with it, and without it each
        # stream's first chunks on a reused connection sat ~40 ms (Nagle and delayed ACKs); uvicorn's don't.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        log.uvicorn(f"[Errno {exc.errno}] error while attempting to bind on address ({host!r}, {port}): "
                    f"{(exc.strerror or str(exc)).lower()}", level="ERROR")
        sys.stdout.flush()
        os._exit(1)
    if faults.child_holds_port or faults.escape_session:
        server.spawn_port_holder(sock, new_session=faults.escape_session)
    api = Api(server)

    def access(request: HttpRequest, status: int) -> None:
        from ._http import REASONS
        log.uvicorn(f'{request.client} - "{request.method} {request.target} {request.version}" {status} '
                    f'{REASONS.get(status, "")}')
        if server.ready and request.method == "POST":
            mark("first_response")  # a bad answer's moment: every response of a garbage/drift config is bad

    http = HttpServer(api, access_log=access, keep_alive_s=float(os.environ.get("SGLANG_TIMEOUT_KEEP_ALIVE", "5")))
    server.server = await asyncio.start_server(http.serve, sock=sock, limit=1 << 20)
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    shown = f"[{host}]" if ":" in host else host
    log.uvicorn(f"Uvicorn running on http://{shown}:{port} (Press CTRL+C to quit)")
    server.up = True
    for group in server.groups:
        loop.create_task(server.run_group(group))

    if not values.get("skip_server_warmup"):
        await server.phase(1.0)  # the warm-up thread polls /get_model_info once a second
        log.uvicorn(f'127.0.0.1:{_ephemeral(port)} - "GET /get_model_info HTTP/1.1" 200 OK')
        text = "The capital city of France is"
        ids = server.tokenizer.encode(text)
        await asyncio.gather(*(api._run(Item(ids, text, Sampling(max_new_tokens=8, temperature=0.0), False, -1, 0,
                                             False)) for _ in range(max(1, knobs.dp))))
        log.uvicorn(f'127.0.0.1:{_ephemeral(port) + 1} - "POST /generate HTTP/1.1" 200 OK')
    if faults.warmup_503 > 0:
        mark("warmup_503")
        await asyncio.sleep(faults.warmup_503)  # wall seconds, silent; /health* answer 503 until ready
    server.ready = True
    log.main("The server is fired up and ready to roll!")
    await server.forever.wait()


def _ephemeral(port: int) -> int:
    return 40000 + (port * 7919) % 20000
