"""A small HTTP/1.1 client for the probe's streamed requests: one JSON POST, Server-Sent Events back.

Why not httpx here: at 64 concurrent streams on one core httpx spent about 33 us of client CPU per
streamed token (h11 turns every HTTP chunk into an event through a pure-Python state machine, then
httpx decodes text and splits lines, again per chunk). Against a fast server the probe then measured its
own client: 30,000 tok/s where vLLM's benchmark client (aiohttp, whose HTTP parser is C) measured
41,000 tok/s from the same server (benchmarks/probe_ceiling.py). This client takes whatever the socket
holds in one read, undoes chunked transfer encoding and splits SSE lines with bytes methods, and hands
the caller all `data:` payloads of that read at once. aiohttp (what vLLM's client uses) would at best tie
with the engine's own client, and the probe must not be the limit of what it measures.

Scope: what a server the tuner launched speaks. http:// and https:// URLs, keep-alive connections,
bodies framed by Content-Length, chunked encoding or the connection's end. No proxies, redirects or
compression (no request asks for any).
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

READ_SIZE = 1 << 18  # bytes asked of the socket at a time: everything that is there, usually
REARM_S = 1.0  # the idle timer is moved at most this often (moving it on every read costs time)


class StreamError(Exception):
    """The connection failed or the server's HTTP framing was not understood."""


class StreamTimeout(StreamError):
    """No connection within the connect timeout, or no byte from the server for the read timeout."""


class _Connection:
    """One keep-alive connection, with a timer that aborts it when the server goes quiet."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle_timeout: float) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_timeout = idle_timeout
        self.timed_out = False
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    def usable(self) -> bool:
        return not (self.writer.is_closing() or self.reader.at_eof())

    def arm(self) -> None:
        """(Re)start the idle timer before a wait for the server. A timer that still has all but
        REARM_S of its time left is kept: the timeout is then between idle_timeout - REARM_S and
        idle_timeout after the last byte."""
        deadline = self._loop.time() + self.idle_timeout
        if self._timer is not None:
            if deadline - self._timer.when() < REARM_S:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(deadline, self._expire)

    def disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        # Aborting makes the pending read see the end of the stream; the reader then raises StreamTimeout.
        self.timed_out = True
        self.writer.transport.abort()

    def close(self) -> None:
        self.disarm()
        self.writer.transport.abort()  # no lingering: a half-read stream is not worth a polite close

    async def read_some(self) -> bytes:
        self.arm()
        try:
            data = await self.reader.read(READ_SIZE)
        except OSError as exc:
            raise StreamError(f"{type(exc).__name__}: {exc}") from exc
        if not data:
            self._raise_closed("the server closed the connection mid-response")
        return data

    async def read_head(self) -> bytes:
        self.arm()
        try:
            return await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self._raise_closed("the server closed the connection before a response"
                               if not exc.partial else "the server closed the connection mid-header")
        except asyncio.LimitOverrunError as exc:
            raise StreamError("response header too large") from exc
        except OSError as exc:
            raise StreamError(f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")

    def _raise_closed(self, message: str) -> None:
        if self.timed_out:
            raise StreamTimeout(f"ReadTimeout: no data for {self.idle_timeout:g} s")
        raise StreamError(message)


class _ChunkedDecoder:
    """Undoes `Transfer-Encoding: chunked` incrementally; `done` once the last chunk and trailers are in."""

    def __init__(self) -> None:
        self.pending = b""  # undecoded bytes: a partial size line or chunk end
        self.left = 0  # payload bytes still to come in the current chunk
        self.after_data = False  # the CRLF that ends a chunk's payload is due
        self.in_trailers = False
        self.done = False
        self.extra = b""  # bytes after the body (should not exist without pipelining)

    def feed(self, data: bytes) -> bytes:
        buf = self.pending + data if self.pending else data
        pos, end, out = 0, len(buf), []
        while pos < end and not self.done:
            if self.left:
                take = min(self.left, end - pos)
                out.append(buf[pos:pos + take])
                pos += take
                self.left -= take
                self.after_data = self.left == 0
                continue
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                break
            line = buf[pos:line_end]
            pos = line_end + 2
            if self.after_data:
                if line:
                    raise StreamError("malformed chunked body: a chunk does not end with CRLF")
                self.after_data = False
            elif self.in_trailers:
                self.done = not line  # trailer fields end with an empty line
            else:
                self.left = _chunk_size(line)
                self.in_trailers = self.left == 0
        if self.done:
            self.extra, self.pending = buf[pos:], b""
        else:
            self.pending = buf[pos:]
        return b"".join(out)


def _chunk_size(line: bytes) -> int:
    try:
        return int(line.split(b";", 1)[0].strip(), 16)
    except ValueError:
        raise StreamError(f"malformed chunk size line {line[:40]!r}") from None


class _SizedDecoder:
    """A body of Content-Length bytes, or (length None) one that ends when the server closes."""

    def __init__(self, length: int | None) -> None:
        self.left = length
        self.done = length == 0
        self.extra = b""

    def feed(self, data: bytes) -> bytes:
        if self.left is None:
            return data
        body, self.extra = data[:self.left], data[self.left:]
        self.left -= len(body)
        self.done = self.left == 0
        return body


class _SSELines:
    """Complete lines of an event stream, and of those the payloads of `data:` lines."""

    def __init__(self) -> None:
        self.partial = b""

    def feed(self, data: bytes) -> list[bytes]:
        if self.partial:
            data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        # strip() takes the optional space after "data:" and the CR of CRLF line ends.
        return [line[5:].strip() for line in lines if line.startswith(b"data:")]

    def flush(self) -> list[bytes]:
        """The last line when the stream ended without a newline after it."""
        line, self.partial = self.partial, b""
        return [line[5:].strip()] if line.startswith(b"data:") else []


class StreamResponse:
    """One POST and its response; use as `async with client.stream(...) as response`."""

    def __init__(self, client: StreamClient, path: str, body: Any) -> None:
        self._client = client
        self._request = client.request_bytes(path, body)
        self._conn: _Connection | None = None
        self._decoder: _ChunkedDecoder | _SizedDecoder | None = None
        self._keep_alive = False
        self.status = 0
        self.headers: dict[str, str] = {}

    async def __aenter__(self) -> StreamResponse:
        # A pooled connection the server has meanwhile closed shows as a closed connection before any
        # response byte: then the request goes once more on a new connection (it never reached the server).
        conn, reused = await self._client.acquire()
        try:
            head = await self._send(conn)
        except StreamError:
            conn.close()
            if not reused or conn.timed_out:
                raise
            conn = await self._client.connect()
            try:
                head = await self._send(conn)
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        try:
            self._parse_head(head)
        except BaseException:
            conn.close()
            raise
        return self

    async def _send(self, conn: _Connection) -> bytes:
        try:
            conn.writer.write(self._request)
            await conn.writer.drain()
        except OSError as exc:
            raise StreamError(f"{type(exc).__name__}: {exc}") from exc
        while True:
            head = await conn.read_head()
            if head[9:10] != b"1":  # "HTTP/1.1 1xx": an interim response (e.g. 103); the real one follows
                return head

    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            version, self.status = parts[0], int(parts[1])
        except (IndexError, ValueError):
            raise StreamError(f"malformed status line {lines[0][:80]!r}") from None
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self._keep_alive = connection == "keep-alive" if version == "HTTP/1.0" else connection != "close"
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._decoder = _ChunkedDecoder()
        elif "content-length" in self.headers:
            try:
                self._decoder = _SizedDecoder(int(self.headers["content-length"]))
            except ValueError:
                raise StreamError(f"malformed Content-Length {self.headers['content-length']!r}") from None
        else:
            self._decoder = _SizedDecoder(None)
            self._keep_alive = False  # the body ends when the connection does

    async def _body_parts(self) -> AsyncIterator[bytes]:
        assert self._conn is not None and self._decoder is not None
        decoder = self._decoder
        while not decoder.done:
            try:
                data = await self._conn.read_some()
            except StreamError:
                if isinstance(decoder, _SizedDecoder) and decoder.left is None and not self._conn.timed_out:
                    return  # a body without length ends with the connection
                raise
            yield decoder.feed(data)

    async def data_batches(self) -> AsyncIterator[list[bytes]]:
        """The payloads of the stream's `data:` lines, as lists: those that one socket read completed."""
        lines = _SSELines()
        async for part in self._body_parts():
            if part:
                payloads = lines.feed(part)
                if payloads:
                    yield payloads
        tail = lines.flush()
        if tail:
            yield tail

    async def read(self) -> bytes:
        """The whole body (for a response that is not a stream, e.g. an error)."""
        return b"".join([part async for part in self._body_parts()])

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        decoder = self._decoder
        clean = (exc_type is None and self._keep_alive and decoder is not None and decoder.done
                 and not decoder.extra and conn.usable())
        if clean:
            self._client.release(conn)
        else:
            conn.close()


class StreamClient:
    """Keep-alive connections to one server (with `reuse=False`, a new one for every request, as SGLang's
    bench_serving connects); `stream(path, body)` POSTs `body` as JSON."""

    def __init__(self, base_url: str, headers: Mapping[str, str], read_timeout: float,
                 connect_timeout: float = 10.0, reuse: bool = True) -> None:
        url = urlsplit(base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"base URL must be http://host[:port] or https://..., got {base_url!r}")
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._prefix = url.path.rstrip("/")
        host_header = url.netloc.rpartition("@")[2]
        for name, value in headers.items():
            if any(c in f"{name}{value}" for c in "\r\n\0"):
                raise ValueError(f"header {name!r} contains a line break")
        lines = [f"Host: {host_header}", "Content-Type: application/json", "Accept: text/event-stream",
                 *(f"{name}: {value}" for name, value in headers.items())]
        self._head_fields = "".join(f"{line}\r\n" for line in lines)
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self.reuse = reuse

    def request_bytes(self, path: str, body: Any) -> bytes:
        # Encoded as httpx encodes `json=`: compact, UTF-8, NaN refused.
        payload = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
        head = (f"POST {self._prefix}{path} HTTP/1.1\r\n{self._head_fields}"
                f"Content-Length: {len(payload)}\r\n\r\n")
        return head.encode("latin-1") + payload

    def stream(self, path: str, body: Any) -> StreamResponse:
        return StreamResponse(self, path, body)

    async def connect(self) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(self._host, self._port, ssl=self._ssl, limit=READ_SIZE),
                self.connect_timeout)
        except asyncio.TimeoutError:
            raise StreamTimeout(f"ConnectTimeout: no connection within {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise StreamError(f"ConnectError: {exc}") from exc
        return _Connection(reader, writer, self.read_timeout)

    async def acquire(self) -> tuple[_Connection, bool]:
        """A pooled connection (reused True) or a new one."""
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn, True
            conn.close()
        return await self.connect(), False

    def release(self, conn: _Connection) -> None:
        if not self.reuse:
            conn.close()
            return
        conn.disarm()
        self._idle.append(conn)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
