"""SMAC3 as an anchor for benchmarks/search_efficiency.py: random-forest BO made for algorithm configuration with
crashes, driven through its ask/tell interface with the same budget and the same information as the tuner.

How the tuner's space maps onto ConfigSpace (SMAC's own space language):
- a categorical or bool flag: a Categorical over the indices of its choices (ConfigSpace wants hashable items of
  one kind; an index keeps `None`, numbers and strings apart);
- an int or float flag: an Integer over the positions of its step grid (ConfigSpace 1.x has no `q`; a stepped
  float is the grid the tuner samples anyway), so the forest still sees the order;
- `when:` becomes an InCondition per parent (an AndConjunction for several), so SMAC samples a dependent flag
  only where it is active, as Optuna's define-by-run does;
- declared constraints are not expressible as ConfigSpace forbidden clauses (products, divisibility): a
  proposal that breaks one is told back as a crash without a launch, and costs a trial but no restart, as
  `invalid_config` does in the tuner and for random search.
The baseline is the first configuration (`additional_configs` of the initial design). A failed server is
`StatusType.CRASHED` at the crash cost (a throughput of 0, SMAC minimises the negated objective); a repeated
proposal is answered from the earlier measurement without a restart, as the tuner reuses it.
"""

from __future__ import annotations

import importlib.util
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.spec._space import Space


def available() -> str | None:
    """Why SMAC cannot run here, or None."""
    if importlib.util.find_spec("smac") is None:  # as the GP check does: no import of the package just to ask
        return "needs the smac package (pip install -e '.[bench]')"
    return None


def _grid(space: Space, name: str) -> list[Any]:
    return space.params[name].grid()


def config_space(space: Space, seed: int) -> Any:
    from ConfigSpace import AndConjunction, Categorical, ConfigurationSpace, InCondition, Integer

    cs = ConfigurationSpace(seed=seed)
    kinds = {}
    for name in space.order:
        p = space.params[name]
        if not p.sampled:
            continue
        values = _grid(space, name)
        indices = list(range(len(values)))
        if p.type in ("categorical", "bool"):
            kinds[name] = Categorical(name, indices)
        else:
            kinds[name] = Integer(name, (0, len(values) - 1))
    cs.add(list(kinds.values()))
    for name, hp in kinds.items():
        parts = []
        for parent, allowed in space.params[name].when.items():
            if parent not in kinds:
                continue  # a fixed flag: the condition holds for every trial or none
            parent_values = _grid(space, parent)
            parts.append(InCondition(hp, kinds[parent], [parent_values.index(v) for v in allowed]))
        if len(parts) == 1:
            cs.add(parts[0])
        elif parts:
            cs.add(AndConjunction(*parts))
    return cs


def values_of(space: Space, config: Any) -> dict[str, Any]:
    return {name: _grid(space, name)[int(index)] for name, index in dict(config).items()}


def run_smac(space: Space, seed: int, trials: int, maximize: bool,
             measure: Callable[[int, dict[str, Any]], float | None]) -> None:
    """Asks SMAC for `trials` configurations; `measure(number, values)` runs (or reuses, or refuses) one and
    returns the observed value, None when it failed."""
    from ConfigSpace import Configuration
    from smac import HyperparameterOptimizationFacade, Scenario
    from smac.runhistory import StatusType, TrialValue

    crash_cost = 0.0 if maximize else 1e12  # as bad as no throughput at all (SMAC minimises the cost)
    cs = config_space(space, seed)
    # SMAC's random forest averages empty leaves while few trials have run: numpy's warning, not ours.
    with tempfile.TemporaryDirectory(prefix="smac-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        scenario = Scenario(cs, deterministic=True, n_trials=trials, seed=seed, crash_cost=crash_cost,
                            output_directory=Path(tmp) / "out")
        first = None
        if space.baseline:
            first = [Configuration(cs, values={name: _grid(space, name).index(value)
                                               for name, value in space.baseline.items() if name in cs})]
        design = HyperparameterOptimizationFacade.get_initial_design(scenario, n_configs=5, additional_configs=first)
        smac = HyperparameterOptimizationFacade(scenario, lambda config, seed=0: 0.0, initial_design=design,
                                                 overwrite=True, logging_level=40)
        for number in range(trials):
            info = smac.ask()
            observed = measure(number, values_of(space, info.config))
            if observed is None:
                smac.tell(info, TrialValue(cost=crash_cost, status=StatusType.CRASHED))
            else:
                smac.tell(info, TrialValue(cost=-observed if maximize else observed))
