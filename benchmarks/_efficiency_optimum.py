"""The true optimum of a problem for benchmarks/search_efficiency.py: exhaustive or multi-start local search,
cached under .cache/search_efficiency/."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import _efficiency_problems  # first: it sets OMP_NUM_THREADS and puts the repository on sys.path

from tuner.spec._space import Space  # noqa: E402

from _efficiency_problems import EXHAUSTIVE_MAX, GENERATED_EXHAUSTIVE_MAX, OPTIMUM_METHOD, Problem  # noqa: E402
from _efficiency_strategies import TrialRecord, _problem, complete  # noqa: E402


# -- the true optimum -----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Optimum:
    value: float
    point: dict[str, Any]
    method: str
    evaluated: int  # configurations the noiseless model evaluated to find it


def neighbours(space: Space, point: Mapping[str, Any]) -> Iterable[dict[str, Any]]:
    """Every point that differs in one parameter's value; parameters that this switches on take each of their
    values (so a backend is judged together with its own sub-options, not only with one default of them)."""
    for name in space.order:
        p = space.params[name]
        if not p.sampled or name not in point:
            continue
        for value in p.grid():
            if value == point[name]:
                continue
            yield from _completions(space, {**point, name: value})


def _completions(space: Space, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    points: list[dict[str, Any]] = [{}]
    for name in space.order:
        p = space.params[name]
        if not p.sampled:
            continue
        nxt = []
        for pt in points:
            if not space.active(p, pt):
                nxt.append(pt)
            elif name in values:
                nxt.append({**pt, name: values[name]})
            else:
                nxt.extend({**pt, name: v} for v in p.grid())
        points = nxt
    return points


def local_search(problem: Problem, start: dict[str, Any]) -> tuple[float | None, dict[str, Any]]:
    """Best-improvement hill climb over one-parameter moves on the grid."""
    point, value = start, problem.point_value(start)
    while True:
        best_point, best_value = None, value
        for cand in neighbours(problem.space, point):
            v = problem.point_value(cand)
            if problem.better(v, best_value):
                best_point, best_value = cand, v
        if best_point is None:
            return value, point
        point, value = best_point, best_value


def search_optimum(problem: Problem, starts: int, exhaustive: bool) -> Optimum:
    space = problem.space
    most = GENERATED_EXHAUSTIVE_MAX if problem.generated else EXHAUSTIVE_MAX
    points = space.grid_points(limit=most * 4) if exhaustive else None
    valid = [p for p in points if not space.violations(p)] if points is not None else None
    best_value, best_point = None, {}
    if valid is not None and len(valid) <= most:
        for p in valid:
            v = problem.point_value(p)
            if problem.better(v, best_value):
                best_value, best_point = v, p
        return Optimum(best_value, best_point, f"exhaustive over {len(valid)} grid points", len(problem._true))
    rng = random.Random(0)
    sample = [space.random_sample(rng) for _ in range(max(50, starts * 10))]
    scored = [(problem.point_value(p), p) for p in sample]
    feasible = [(v, p) for v, p in scored if v is not None]
    feasible.sort(key=lambda vp: -vp[0] if problem.maximize else vp[0])
    begin = [dict(space.baseline)] if space.baseline else []
    begin += [dict(p) for p in problem.spec.try_first]
    begin += [p for _, p in feasible[:max(1, starts // 2)]]
    rest = [p for _, p in feasible[max(1, starts // 2):]]
    begin += rng.sample(rest, min(len(rest), max(0, starts - len(begin))))
    for start in begin[:max(1, starts)]:
        v, p = local_search(problem, complete(space, start, start))
        if problem.better(v, best_value):
            best_value, best_point = v, p
    return Optimum(best_value, best_point, f"local search from {min(len(begin), max(1, starts))} starts",
                   len(problem._true))


def _digest(problem: Problem) -> str:
    h = hashlib.sha256(f"{OPTIMUM_METHOD} intermittent={problem.intermittent}".encode())
    for path in [problem.profile_path, problem.space_path, _efficiency_problems.REPO / "tuner" / "spec" / "_space.py",
                 *sorted((_efficiency_problems.REPO / "tuner" / "sim").glob("*.py")),
                 *sorted((_efficiency_problems.REPO / "tuner" / "flags").glob("*.py"))]:  # the simulator's parser
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


RAISED = "; raised to a better point a strategy found"
CACHED = " (cached)"


def _cache_path(problem: Problem) -> Path:
    return _efficiency_problems.CACHE_DIR / f"{problem.name}-{_digest(problem)}.json"


def save_optimum(problem: Problem, optimum: Optimum) -> None:
    _efficiency_problems.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    saved = dataclasses.replace(optimum, method=optimum.method.replace(CACHED, ""))
    _cache_path(problem).write_text(json.dumps(dataclasses.asdict(saved), default=str))


def true_optimum(problem: Problem, starts: int, quick: bool, use_cache: bool) -> Optimum:
    """The cached optimum of the full search if there is one; otherwise search (and cache a full search)."""
    path = _cache_path(problem)
    if use_cache and path.exists():
        data = json.loads(path.read_text())
        return Optimum(data["value"], data["point"], data["method"] + CACHED, data["evaluated"])
    optimum = search_optimum(problem, starts=2 if quick else starts, exhaustive=not quick)
    if not quick and use_cache:
        save_optimum(problem, optimum)
    return optimum


def optimum_task(task: tuple[str, float, int, bool, bool]) -> tuple[str, Optimum, float]:
    """true_optimum for one landscape, in a worker process (the local search takes up to a minute)."""
    name, intermittent, starts, quick, use_cache = task
    t = time.monotonic()
    return name, true_optimum(_problem(name, intermittent), starts, quick, use_cache), time.monotonic() - t


def raise_optimum(problem: Problem, optimum: Optimum, runs: Iterable[list[TrialRecord]]) -> Optimum:
    """The optimum, or the best configuration a strategy measured if that is better (the local search is a
    search: it can miss)."""
    found = [r for recs in runs for r in recs if r.true is not None]
    if not found:
        return optimum
    best = (max if problem.maximize else min)(found, key=lambda r: r.true)
    if not problem.better(best.true, optimum.value):
        return optimum
    method = optimum.method.replace(CACHED, "").replace(RAISED, "") + RAISED
    return Optimum(best.true, dict(best.flags), method, optimum.evaluated)
