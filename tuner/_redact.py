"""Keep secrets out of logs, trial attributes, notes, reports and exports."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

MASK = "***"
# Names that end in _TOKEN or _KEY, or contain SECRET/PASSWORD: HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD;
# not max_num_batched_tokens.
_SECRET_NAME = re.compile(r"(_TOKEN$|_KEY$|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = {"--api-key", "--admin-api-key", "--hf-token", "--token"}


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name.replace("-", "_"))) or name.lower() in ("token", "key")


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_name(k) else v) for k, v in env.items()}


def redact_argv(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
        elif arg in _SECRET_FLAGS:
            out.append(arg)
            hide_next = True
        elif "=" in arg and arg.split("=", 1)[0] in _SECRET_FLAGS:
            out.append(arg.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(arg)
    return out


def redact_url(url: str) -> str:
    """A storage URL with its password masked (postgresql://tuner:***@host/db); a URL without one as it is.
    For what the tuner prints or records of a URL; connecting needs the URL as given."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")  # a password may hold "@" only escaped; the last one ends it
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    path = re.sub(r"(?i)((?:^|[?&])(?:password|passwd)=)[^&]*", rf"\g<1>{MASK}", path)
    return f"{scheme}://{netloc}{slash}{path}"


def redact_flags(flags: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (MASK if is_secret_name(k) and v not in (None, False, True) else v) for k, v in flags.items()}


class Redactor:
    """Replaces the values of secret environment variables wherever they appear in text."""

    def __init__(self, env: Mapping[str, str], extra: Sequence[str] = ()) -> None:
        values = [v for k, v in env.items() if is_secret_name(k) and len(v) >= 4]
        values += [v for v in extra if v and len(v) >= 4]
        self._values = sorted(set(values), key=len, reverse=True)
        self.longest = max((len(v.encode()) for v in self._values), default=0)  # bytes

    def __call__(self, text: str) -> str:
        for value in self._values:
            text = text.replace(value, MASK)
        return text

    def copy(self, src: BinaryIO, dst: BinaryIO, size: int, block: int = 1 << 20) -> None:
        """Copy `size` bytes from `src` to `dst` with the secrets masked, a block at a time. A secret cut
        by a block's end is kept whole for the next block."""
        pattern = re.compile(b"|".join(re.escape(v.encode()) for v in self._values)) if self._values else None
        keep = max(self.longest - 1, 0)
        carry = b""
        left = size
        while left > 0:
            data = src.read(min(block, left))
            if not data:
                break
            left -= len(data)
            buf = carry + data
            if pattern is None:
                dst.write(buf)
                carry = b""
                continue
            cut = len(buf) if left <= 0 else max(0, len(buf) - keep)
            for match in pattern.finditer(buf):
                if match.start() < cut < match.end():
                    cut = match.end()
            dst.write(pattern.sub(MASK.encode(), buf[:cut]))
            carry = buf[cut:]
        if carry:
            dst.write(pattern.sub(MASK.encode(), carry) if pattern is not None else carry)
