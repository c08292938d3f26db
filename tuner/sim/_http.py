"""A small HTTP/1.1 server on asyncio streams: keep-alive, Content-Length or chunked bodies, chunked streaming.

Only what SGLang's API needs. Each streamed event is one `write()` (one chunk), and the writer only awaits
`drain()` when the transport's buffer is actually full, so streaming costs little per token.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           413: "Request Entity Too Large", 431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}
MAX_BODY = 256 * 1024 * 1024
HIGH_WATER = 256 * 1024


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class HttpRequest:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    body: bytes
    client: str
    path: str = ""
    query: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = urlsplit(self.target)
        self.path = parts.path or "/"
        self.query = parse_qs(parts.query)

    def json(self) -> Any:
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise HttpError(400, f"invalid JSON body: {exc}") from None


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class StreamingResponse:
    chunks: AsyncIterator[bytes]
    status: int = 200
    content_type: str = "text/event-stream; charset=utf-8"


def dumps(obj: Any) -> bytes:
    # orjson-like compact output; SGLang serialises NaN/inf logprobs as null (they are None by now).
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def json_response(obj: Any, status: int = 200) -> Response:
    return Response(status=status, body=dumps(obj))


Handler = Callable[[HttpRequest], Awaitable["Response | StreamingResponse"]]


class HttpServer:
    def __init__(self, handler: Handler, access_log: Callable[[HttpRequest, int], None] | None = None,
                 keep_alive_s: float = 5.0) -> None:
        self.handler = handler
        self.keep_alive_s = keep_alive_s
        self.access_log = access_log
        self.connections: set[asyncio.StreamWriter] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        client = f"{peer[0]}:{peer[1]}"
        self.connections.add(writer)
        first = True
        try:
            while True:
                try:
                    # As uvicorn with SGLang's SGLANG_TIMEOUT_KEEP_ALIVE (5 s): an idle kept-alive connection
                    # is closed, and a client must reconnect.
                    wait = None if first else self.keep_alive_s
                    request = await asyncio.wait_for(self._read_request(reader, client), wait)
                except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                    return
                except HttpError as exc:
                    await self._send(writer, Response(exc.status, dumps({"detail": str(exc)})), keep_alive=False)
                    return
                first = False
                if request is None:
                    return
                keep_alive = self._keep_alive(request)
                try:
                    response = await self.handler(request)
                except HttpError as exc:
                    response = json_response({"error": {"message": str(exc)}}, exc.status)
                if self.access_log is not None:
                    self.access_log(request, response.status)
                if isinstance(response, StreamingResponse):
                    ok = await self._stream(writer, response, keep_alive)
                    if not ok:
                        return
                else:
                    await self._send(writer, response, keep_alive)
                if not keep_alive:
                    return
        except (ConnectionError, asyncio.CancelledError):
            return
        finally:
            self.connections.discard(writer)
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - the peer may be long gone
                pass

    @staticmethod
    def _keep_alive(request: HttpRequest) -> bool:
        connection = request.headers.get("connection", "").lower()
        if request.version == "HTTP/1.0":
            return connection == "keep-alive"
        return connection != "close"

    async def _read_request(self, reader: asyncio.StreamReader, client: str) -> HttpRequest | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise HttpError(431, "request head too large") from None
        except asyncio.IncompleteReadError as exc:
            if exc.partial.strip():
                raise
            return None
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            raise HttpError(400, "malformed request line") from None
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        body = b""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size_line = await reader.readuntil(b"\r\n")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    await reader.readuntil(b"\r\n")
                    break
                parts.append(await reader.readexactly(size))
                await reader.readexactly(2)
            body = b"".join(parts)
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if length > MAX_BODY:
                raise HttpError(413, "body too large")
            body = await reader.readexactly(length)
        return HttpRequest(method=method.upper(), target=target, version=version.strip(), headers=headers,
                           body=body, client=client)

    @staticmethod
    def _head(status: int, content_type: str, keep_alive: bool, extra: dict[str, str]) -> list[str]:
        lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}", "server: uvicorn",
                 f"content-type: {content_type}"]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        if not keep_alive:
            lines.append("connection: close")
        return lines

    async def _send(self, writer: asyncio.StreamWriter, response: Response, keep_alive: bool) -> None:
        lines = self._head(response.status, response.content_type, keep_alive, response.headers)
        lines.append(f"content-length: {len(response.body)}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body)
        await writer.drain()

    async def _stream(self, writer: asyncio.StreamWriter, response: StreamingResponse, keep_alive: bool) -> bool:
        lines = self._head(response.status, response.content_type, keep_alive, {"transfer-encoding": "chunked"})
        transport = writer.transport
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        chunks = response.chunks
        try:
            async for chunk in chunks:
                if transport.is_closing():
                    return False  # the client went away; closing the generator aborts the request
                writer.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                if transport.get_write_buffer_size() > HIGH_WATER:
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            return True
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await aclose()
