"""The space file loader: what it accepts, and the one-line errors for what it refuses."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner import SpaceError, TunerError, parse_spec

BASE = """
name: t
server:
  model-path: /m
  fixed: {tp-size: 2}
params:
  attention-backend: {type: categorical, choices: [fa3, triton]}
  mem-fraction-static: {type: float, low: 0.8, high: 0.9, step: 0.01}
  disable-cuda-graph: {type: bool}
  cuda-graph-max-bs: {type: int, low: 8, high: 64, step: 8, when: {disable-cuda-graph: false}}
  cuda-graph-bs: {type: list, up-to: cuda-graph-max-bs, values: [1, 2, 4, 8, 16, 32, 64], when: {disable-cuda-graph: false}}
  dp-size: {type: categorical, choices: [1, 2, 4]}
  SGLANG_FOO: {type: categorical, choices: ["0", "1"]}
constraints:
  - product: [tp-size, dp-size]
    max: 4
baseline: {attention-backend: fa3, mem-fraction-static: 0.85, disable-cuda-graph: false, cuda-graph-max-bs: 16,
           dp-size: 1, SGLANG_FOO: "0"}
"""


def load(extra: str = "", base: str = BASE):
    return parse_spec(textwrap.dedent(base) + textwrap.dedent(extra))


def error_of(text: str) -> str:
    with pytest.raises(SpaceError) as info:
        parse_spec(textwrap.dedent(text))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_valid_space_loads_with_defaults():
    spec = load()
    assert spec.engine == "sglang"
    assert spec.server.host == "127.0.0.1"
    assert spec.space.params["SGLANG_FOO"].env
    assert spec.objective.metric == "output_throughput" and spec.objective.direction == "maximize"
    assert spec.gate.prompts[0].expect == "Paris"


def test_config_derives_list_and_drops_inactive():
    space = load().space
    cfg = space.config({"attention-backend": "fa3", "mem-fraction-static": 0.85, "disable-cuda-graph": False,
                        "cuda-graph-max-bs": 16, "dp-size": 2, "SGLANG_FOO": "1"})
    assert cfg.flags["cuda-graph-bs"] == [1, 2, 4, 8, 16]
    assert cfg.flags["tp-size"] == 2
    assert cfg.env == {"SGLANG_FOO": "1"}
    off = space.config({"attention-backend": "fa3", "mem-fraction-static": 0.85, "disable-cuda-graph": True,
                        "dp-size": 1, "SGLANG_FOO": "0"})
    assert "cuda-graph-bs" not in off.flags and "cuda-graph-max-bs" not in off.flags
    assert off.flags["disable-cuda-graph"] is True


def test_constraints_are_declarative():
    space = load().space
    assert space.violations({"dp-size": 4}) == ["tp-size x dp-size <= 4"]
    assert space.violations({"dp-size": 2}) == []


@pytest.mark.parametrize("text, expected", [
    ("name: [", "not valid YAML"),
    ("", "is empty"),
    ("name: t\nserver: {model-path: /m}\nparams: {}\n", "params: is empty"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: int, low: 5, high: 1}\n", "low (5) is greater than high (1)"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: integer, low: 1, high: 2}\n", "did you mean 'int'"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: int, low: x, high: 2}\n", "params.a.low: must be an integer"),
    ("name: t\nserver: {model-path: /m}\nparms: {}\n", "did you mean 'params' where you wrote 'parms'"),
    ("name: t\nserver: {}\nparams:\n  a: {type: bool}\n", "server.model-path: is required"),
    ("server: {model-path: /m}\nparams:\n  a: {type: bool}\n", "name: is required"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: bool, when: {b: true}}\n", "params.a.when.b: names no parameter"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: categorical, choices: [1, 2]}\n"
     "constraints:\n  - product: [a]\n    max: 0\n", "no configuration of the space satisfies"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: categorical, choices: [1, 2]}\nbaseline: {a: 3}\n",
     "baseline.a: 3 is outside the space"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: categorical, choices: [1, 2]}\nbaseline: {}\n",
     "baseline.a: is missing"),
    ("name: t\nengine: tgi\nserver: {model-path: /m}\nparams:\n  a: {type: bool}\n", "unknown engine 'tgi'"),
    ("name: t\nserver: {model-path: /m, fixed: {port: 1}}\nparams:\n  a: {type: bool}\n", "the tuner picks a free port"),
    ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: bool}\nobjective: {metric: speed}\n", "unknown metric"),
])
def test_bad_input_names_key_and_fix(text, expected):
    assert expected in error_of(text)


def test_cycle_in_conditions_is_refused():
    text = ("name: t\nserver: {model-path: /m}\nparams:\n  a: {type: bool, when: {b: true}}\n"
            "  b: {type: bool, when: {a: true}}\n")
    assert "cycle" in error_of(text)


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 100) | st.floats(allow_nan=False, width=32)
    | st.sampled_from(["int", "float", "bool", "categorical", "list", "name", "x", "gpus", "tp-size"]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["name", "server", "params", "type", "low", "high", "choices", "when",
                                        "model-path", "baseline", "constraints", "product", "max", "a", "b",
                                        "gate", "probe", "objective", "step", "values", "up-to"]), children,
                      max_size=5),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(yaml_values)
def test_loader_loads_or_raises_its_own_error(value):
    text = yaml.safe_dump(value)
    try:
        parse_spec(text)
    except TunerError as exc:
        assert "\n" not in str(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_loads_or_raises_its_own_error(text):
    try:
        parse_spec(text)
    except TunerError:
        pass


# -- the gate as shipped is the gate that runs ---------------------------------------------------------------

def test_no_shipped_space_loosens_the_gate_unstated():
    from pathlib import Path

    from tuner.spec._spec import LOOSENABLE, GateSpec, load_spec
    spaces = sorted((Path(__file__).parents[2] / "search_spaces").glob("*.yaml"))
    assert spaces
    for path in spaces:
        gate = load_spec(path).gate
        for key in LOOSENABLE:
            value, default = getattr(gate, key.replace("-", "_")), getattr(GateSpec, key.replace("-", "_"))
            if key in gate.loosened:
                assert gate.loosened.get("why"), f"{path.name}: gate.loosen without a why"
                continue
            assert (value is None) == (default is None) and (value is None or value <= default), \
                f"{path.name}: {key} {value} is looser than the default {default} and not in gate.loosen"


GATE_SPACE = """
name: g
engine: sglang
server: {model-path: /m}
params: {mem-fraction-static: {type: float, low: 0.7, high: 0.9}}
gate:
  checks: [finite-logprobs]
"""


def test_a_looser_tolerance_needs_gate_loosen_with_a_why():
    with pytest.raises(SpaceError) as exc:
        parse_spec(GATE_SPACE + "  logprob-tolerance: 0.5\n")
    assert "looser than the shipped default" in str(exc.value) and "gate.loosen" in str(exc.value)
    with pytest.raises(SpaceError, match="has no 'why'"):
        parse_spec(GATE_SPACE + "  loosen: {logprob-tolerance: 0.5}\n")
    spec = parse_spec(GATE_SPACE + "  loosen: {logprob-tolerance: 0.5, why: measured 0.3 on fp8}\n")
    assert spec.gate.logprob_tolerance == 0.5 and spec.gate.loosened["why"] == "measured 0.3 on fp8"
    # Tighter than the default needs no statement.
    assert parse_spec(GATE_SPACE + "  logprob-tolerance: 0.05\n").gate.logprob_tolerance == 0.05


def test_prompts_without_answers_get_every_check_but_known_answer_unless_it_is_named():
    own = "name: g\nserver: {model-path: /m}\nparams: {mem-fraction-static: {type: float, low: 0.7, high: 0.9}}\n" \
          "gate:\n  prompts: [{prompt: The quick brown fox}]\n"
    from tuner.spec._spec import GATE_CHECKS
    assert list(parse_spec(own).gate.checks) == [c for c in GATE_CHECKS if c != "known-answer"]
    message = error_of(own + "  checks: [known-answer, finite-logprobs]\n")
    assert "known-answer is enabled but no prompt has 'expect'" in message
    # The shipped prompts have answers: every check, known-answer included.
    assert list(load().gate.checks) == list(GATE_CHECKS)
