"""Nevergrad as an anchor for benchmarks/search_efficiency.py: its `NGOpt`, the library's own choice of
optimiser for the parametrization and budget it is given (for a discrete space like this one, a portfolio of
evolutionary and discrete methods), through its ask/tell interface with the same budget as the tuner.

How the tuner's space maps onto Nevergrad's parametrization:
- a categorical or bool flag: `ng.p.Choice` over the indices of its choices (unordered);
- an int or float flag: `ng.p.TransitionChoice` over the positions of its step grid (ordered: mutations move to
  neighbouring values), the grid the tuner samples anyway;
- Nevergrad has no conditional parameters: every flag is drawn, and the ones whose `when:` does not hold for the
  drawn values are left out of the configuration, as the tuner leaves them out;
- declared constraints: a proposal that breaks one is told back at the crash loss without a launch, and costs a
  trial but no restart, as `invalid_config` does in the tuner and for random search.
The baseline is the first configuration (`suggest`). A failed server is told the loss of zero throughput
(Nevergrad minimises the negated objective); a repeated proposal is answered from the earlier measurement
without a restart, as the tuner reuses it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from tuner.spec._space import Space


def available() -> str | None:
    """Why Nevergrad cannot run here, or None."""
    if importlib.util.find_spec("nevergrad") is None:
        return "needs the nevergrad package (pip install -e '.[bench]')"
    return None


def run_nevergrad(space: Space, seed: int, trials: int, maximize: bool,
                  measure: Callable[[int, dict[str, Any]], float | None]) -> None:
    """Asks NGOpt for `trials` configurations; `measure(number, values)` runs (or reuses, or refuses) one and
    returns the observed value, None when it failed."""
    import nevergrad as ng

    grids = {name: space.params[name].grid() for name in space.order if space.params[name].sampled}
    ordered = {name for name in grids if space.params[name].type not in ("categorical", "bool")}
    parametrization = ng.p.Dict(**{
        name: (ng.p.TransitionChoice if name in ordered else ng.p.Choice)(list(range(len(values))))
        for name, values in grids.items()})
    parametrization.random_state.seed(seed)
    optimizer = ng.optimizers.NGOpt(parametrization=parametrization, budget=trials, num_workers=1)
    if space.baseline:
        optimizer.suggest({name: grids[name].index(space.baseline.get(name, grids[name][0])) for name in grids})
    crash_loss = 0.0 if maximize else 1e12  # as bad as no throughput at all
    for number in range(trials):
        candidate = optimizer.ask()
        drawn = {name: grids[name][int(index)] for name, index in candidate.value.items()}
        values: dict[str, Any] = {}
        for name in space.order:  # in dependency order, as Space.suggest draws them
            if name in drawn and space.active(space.params[name], values):
                values[name] = drawn[name]
        observed = measure(number, values)
        optimizer.tell(candidate, crash_loss if observed is None else -observed if maximize else observed)
