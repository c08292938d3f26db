"""The probe's HTTP client (tuner/trial/_stream_client.py) against a scripted asyncio server: framing split at
every byte, keep-alive reuse, a pooled connection the server closed, silence, and error bodies."""

from __future__ import annotations

import asyncio
import json

import pytest

from tuner.trial._stream_client import StreamClient, StreamError, StreamTimeout, _ChunkedDecoder, _SSELines


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_chunked_body_decodes_whatever_the_reads_split():
    events = [b'data: {"a": %d}\n\n' % i for i in range(5)] + [b"data: [DONE]\n\n"]
    wire = chunked(*events)
    for step in (1, 2, 3, 7, len(wire)):
        decoder, lines, payloads = _ChunkedDecoder(), _SSELines(), []
        for i in range(0, len(wire), step):
            payloads += lines.feed(decoder.feed(wire[i:i + step]))
        assert decoder.done and not decoder.extra
        assert payloads == [b'{"a": %d}' % i for i in range(5)] + [b"[DONE]"], step


def test_chunk_extensions_trailers_and_crlf_lines():
    decoder = _ChunkedDecoder()
    body = decoder.feed(b"a;ext=1\r\ndata:x\r\n\r\n\r\n0\r\nX-Trailer: 1\r\n\r\n")
    assert decoder.done and _SSELines().feed(body) == [b"x"]


def test_malformed_chunk_size_is_a_stream_error():
    with pytest.raises(StreamError):
        _ChunkedDecoder().feed(b"zz\r\n")


class Scripted:
    """A server that answers each request with the next scripted reply (bytes, or None: close at once,
    or "hang": say nothing), and counts connections and requests."""

    def __init__(self, replies: list) -> None:
        self.replies = list(replies)
        self.connections = 0
        self.bodies: list[dict] = []
        self.heads: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                self.heads.append(head.decode())
                self.bodies.append(json.loads(await reader.readexactly(length)))
                reply = self.replies.pop(0)
                if reply is None:
                    writer.close()
                    return
                if reply == "hang":
                    await asyncio.sleep(30)
                    return
                if isinstance(reply, tuple):  # ("then close", bytes): part of a response, then goodbye
                    writer.write(reply[1])
                    await writer.drain()
                    writer.close()
                    return
                writer.write(reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def sse_reply(*payloads: str) -> bytes:
    body = chunked(*(f"data: {p}\n\n".encode() for p in payloads))
    return b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n" + body


async def collect(client: StreamClient, body: dict) -> tuple[int, list[bytes]]:
    async with client.stream("/v1/completions", body) as response:
        if response.status != 200:
            return response.status, [await response.read()]
        return 200, [p async for batch in response.data_batches() for p in batch]


def serve(replies: list, scenario) -> Scripted:
    server = Scripted(replies)

    async def main() -> None:
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        try:
            await scenario(f"http://127.0.0.1:{port}")
        finally:
            listener.close()

    asyncio.run(main())
    return server


def test_keep_alive_reuses_one_connection_and_sends_headers_and_json():
    async def scenario(url: str) -> None:
        async with StreamClient(url, {"Authorization": "Bearer k"}, read_timeout=5) as client:
            for i in range(3):
                assert await collect(client, {"i": i, "s": "é"}) == (200, [b'{"n": 1}', b"[DONE]"])

    server = serve([sse_reply('{"n": 1}', "[DONE]")] * 3, scenario)
    assert server.connections == 1
    assert [b["i"] for b in server.bodies] == [0, 1, 2] and server.bodies[0]["s"] == "é"
    assert "Authorization: Bearer k\r\n" in server.heads[0] and server.heads[0].startswith("POST /v1/completions ")


def test_without_reuse_every_request_has_its_own_connection():
    # As SGLang's bench_serving connects (one aiohttp session per request): the probe's SGLang engine asks this.
    async def scenario(url: str) -> None:
        async with StreamClient(url, {}, read_timeout=5, reuse=False) as client:
            for i in range(3):
                assert await collect(client, {"i": i}) == (200, [b'{"n": 1}', b"[DONE]"])

    server = serve([sse_reply('{"n": 1}', "[DONE]")] * 3, scenario)
    assert server.connections == 3 and [b["i"] for b in server.bodies] == [0, 1, 2]


def test_a_pooled_connection_the_server_closed_is_retried_on_a_new_one():
    async def scenario(url: str) -> None:
        async with StreamClient(url, {}, read_timeout=5) as client:
            assert (await collect(client, {}))[0] == 200
            assert (await collect(client, {}))[0] == 200  # the first connection is closed at this request

    server = serve([sse_reply("{}"), None, sse_reply("{}")], scenario)
    assert server.connections == 2


def test_error_status_body_is_read_and_connection_close_is_honoured():
    error = b'{"error": "x"}'
    reply = (b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%b"
             % (len(error), error))

    async def scenario(url: str) -> None:
        async with StreamClient(url, {}, read_timeout=5) as client:
            assert await collect(client, {}) == (500, [error])
            assert (await collect(client, {}))[0] == 200

    assert serve([reply, sse_reply("{}")], scenario).connections == 2


def test_silence_is_a_timeout_and_a_stream_cut_short_an_error():
    async def scenario(url: str) -> None:
        async with StreamClient(url, {}, read_timeout=0.3) as client:
            with pytest.raises(StreamTimeout):
                await collect(client, {})
            with pytest.raises(StreamError) as err:
                await collect(client, {})
            assert not isinstance(err.value, StreamTimeout)

    cut_short = sse_reply("{}")[:-5]  # no last chunk: the server went away mid-stream
    serve(["hang", ("then close", cut_short)], scenario)


def test_header_with_a_line_break_is_refused():
    with pytest.raises(ValueError):
        StreamClient("http://127.0.0.1:1", {"X": "a\r\nInjected: 1"}, read_timeout=1)
