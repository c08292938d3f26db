"""A request trace (arrival times and lengths) read into rows, for the probe to replay.

Three formats, all local files (nothing is downloaded):

- `mooncake`: Mooncake's trace JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (the
  prompt's blocks of MOONCAKE_BLOCK tokens; requests with the same leading ids share that prefix);
- `azure`: the Azure LLM inference trace CSV: `TIMESTAMP` (a datetime), `ContextTokens`, `GeneratedTokens`;
- `jsonl`: `{"timestamp": seconds, "prompt": text or "input_len": n, "output_len": n}`.

The spec reads the file when it loads, so a bad row is refused before anything is launched; each error names
the file, the row (1-based, as an editor counts lines) and the field.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

TRACE_FORMATS = ("mooncake", "azure", "jsonl")
# Tokens per hash id in Mooncake's traces (its block size): the prompt is built block by block.
MOONCAKE_BLOCK = 512


class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the row and the field."""


@dataclass(frozen=True)
class TraceRow:
    offset: float  # seconds after the trace's first arrival
    input_len: int | None  # None: `prompt` is the text as given
    output_len: int
    prompt: str | None = None
    hash_ids: tuple[int, ...] = ()


def load_trace(path: str, fmt: str, limit: int | None = None) -> list[TraceRow]:
    """The first `limit` rows (all where None), in arrival order, offsets from the first arrival."""
    if fmt not in TRACE_FORMATS:
        raise TraceError(f"unknown trace format '{fmt}'")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TraceError(f"trace {path} cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise TraceError(f"trace {path} is not text") from None
    stamped = _azure(path, text) if fmt == "azure" else _jsonl(path, text, fmt)
    if not stamped:
        raise TraceError(f"trace {path} has no rows")
    stamped = stamped[:limit] if limit else stamped
    # Arrival order, ties in file order: a trace merged from several logs need not be sorted.
    stamped.sort(key=lambda r: r[0])
    first = stamped[0][0]
    rows = [TraceRow(t - first, *rest) for t, *rest in stamped]
    if len(rows) > 1 and rows[-1].offset <= 0:
        raise TraceError(f"trace {path}: every row has the same timestamp, so it has no arrival pattern to replay")
    return rows


def mean_rate(rows: list[TraceRow]) -> float:
    """Requests/s the trace offers: its gaps' mean rate (a one-row trace: one request in one second)."""
    return (len(rows) - 1) / rows[-1].offset if len(rows) > 1 else 1.0


def loop_trace(rows: list[TraceRow], span: float, at_least: int = 1) -> list[TraceRow]:
    """The rows due within `span` seconds of trace time, the trace repeated from its start (one mean gap after its
    last row) as often as that takes, and at least `at_least` of them. A rate search offers each rate for as
    long as a rate needs: a trace sent once would be a burst of its rows at high rates, not that rate."""
    if not rows:
        return []
    period = len(rows) / mean_rate(rows)
    out: list[TraceRow] = []
    cycle = 0
    while True:
        for row in rows:
            offset = row.offset + cycle * period
            if offset >= span and len(out) >= at_least:
                return out
            out.append(dataclasses.replace(row, offset=offset))
        cycle += 1


def _jsonl(path: str, text: str, fmt: str) -> list[tuple[Any, ...]]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"trace {path} row {n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise TraceError(f"trace {path} row {n}: is not a JSON object")
        where = f"trace {path} row {n}"
        if fmt == "mooncake":
            ids = row.get("hash_ids") or []
            if not isinstance(ids, list):
                raise TraceError(f"{where}: hash_ids is {ids!r:.40}, not a list of whole numbers")
            if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                raise TraceError(f"{where}: hash_ids must be a list of whole numbers")
            rows.append((_number(row, "timestamp", where) / 1000.0, _count(row, "input_length", where),
                         _count(row, "output_length", where), None, tuple(ids)))
        else:
            prompt = row.get("prompt")
            if prompt is not None and not isinstance(prompt, str):
                raise TraceError(f"{where}: prompt is {prompt!r:.40}, not a string")
            length = None if prompt is not None else _count(row, "input_len", where, "or a prompt")
            rows.append((_number(row, "timestamp", where), length, _count(row, "output_len", where), prompt, ()))
    return rows


def _azure(path: str, text: str) -> list[tuple[Any, ...]]:
    reader = csv.DictReader(text.splitlines())
    missing = [f for f in ("TIMESTAMP", "ContextTokens", "GeneratedTokens") if f not in (reader.fieldnames or [])]
    if reader.fieldnames and missing:
        raise TraceError(f"trace {path} row 1: the header has no {missing[0]} column")
    rows = []
    for row in reader:
        where = f"trace {path} row {reader.line_num}"
        rows.append((_datetime(row, where), _count(row, "ContextTokens", where),
                     _count(row, "GeneratedTokens", where), None, ()))
    return rows


def _field(row: dict[str, Any], name: str, where: str, extra: str = "") -> Any:
    if row.get(name) in (None, ""):
        raise TraceError(f"{where}: has no {name}{' ' + extra if extra else ''}")
    return row[name]


def _number(row: dict[str, Any], name: str, where: str) -> float:
    value = _field(row, name, where)
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} is {value!r:.40}, not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise TraceError(f"{where}: {name} is {value!r:.40}, not a finite number")
    return number


def _count(row: dict[str, Any], name: str, where: str, extra: str = "") -> int:
    value = _field(row, name, where, extra)
    try:
        if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
            raise ValueError
        count = int(value)
    except (TypeError, ValueError):
        raise TraceError(f"{where}: {name} is {value!r:.40}, not a whole number") from None
    if count < 1:
        raise TraceError(f"{where}: {name} is {count}, not at least 1")
    return count


def _datetime(row: dict[str, Any], where: str) -> float:
    value = _field(row, "TIMESTAMP", where)
    # Azure's stamps carry 7 fractional digits ("2023-11-16 18:15:46.6805900"); datetime reads at most 6.
    head, dot, frac = value.strip().partition(".")
    try:
        return datetime.fromisoformat(head + (dot + frac[:6] if dot else "")).timestamp()
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP is {value!r:.40}, not a date and time such as "
                         "'2023-11-16 18:15:46.680'") from None
