"""Whatever overrides a user types, a command gives a valid result or one clean error.

Hypothesis draws overrides from the composed configs' own keys (every leaf of ``config.yaml``,
``benchmark.yaml`` and ``profile.yaml``, a group option, or a misspelt key) with values that
are plausible, negative, huge, non-finite, the wrong type or garbage text. Then:

- ``autotune.simulate`` runs in this process: exit 0 with one JSON object whose numbers are all
  finite, or exit 2 with one ``error:`` line and no traceback;
- the search, the benchmark and the profiler are taken up to their work (compose, type,
  ``check()``, build the specs and simulators): either that succeeds or it raises a
  ``UserError``.

Any other exception fails the test, and Hypothesis shrinks it to the smallest override list.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import math
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck
from hypothesis import event
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from omegaconf import DictConfig
from omegaconf import ListConfig
from omegaconf import OmegaConf

from autotune import catalog
from autotune.benchmark import simulators_of
from autotune.config import AutotuneConfig
from autotune.config import BenchmarkConfig
from autotune.config import ProfileConfig
from autotune.config import fixed_layout_values
from autotune.config import load_config
from autotune.config import register_schemas
from autotune.simulators import Layout
from autotune.simulators import UserError

SMALL = ["model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1"]


def _leaves(node: Any, prefix: str = "") -> list[str]:
    """Every leaf key of a composed config, dotted (a list counts as a leaf)."""
    keys: list[str] = []
    for key in map(str, node.keys()):
        child = node._get_node(key)  # noqa: SLF001 - the node, not its resolved value
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            keys += _leaves(child, f"{prefix}{key}.")
        elif not isinstance(child, DictConfig) or child._is_none():
            keys.append(f"{prefix}{key}")
    return keys


def _defaults(config_name: str, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """Every leaf key of a root config and its composed value."""
    register_schemas()
    cfg = catalog.compose(config_name, overrides)
    return {key: OmegaConf.select(cfg, key) for key in _leaves(cfg)}


CONFIG = _defaults("config", tuple(SMALL))
BENCHMARK = _defaults("benchmark")
PROFILE = _defaults("profile", tuple(SMALL))
HIERARCHICAL = {
    k: v for k, v in _defaults("config", ("simulator=hierarchical",)).items() if "simulator." in k
}
_GARBAGE = st.text(alphabet=st.sampled_from("ab1-.e_/ ,[]{}'\"$:=~+\\\x00é"), max_size=8)
_WORDS = st.sampled_from(
    ["nan", "inf", "-inf", "1e308", "1e-308", "0", "0.0", "1", "2", "8", "null", "true"]
    + ["false", "", "[]", "[0]", "[1,2]", "[8,-1]", "{a: 1}", "abc", "${nope}", "[", "'"]
    + ["none", "selective", "full", "gelu", "mla", "fp8", "fp16", "1e9", "grid", "tpe"]
    + ["megatron_lm", "deepspeed", "1f1b", "gpipe", "json", "table", "cpu", "public"]
)
_VALUES = st.one_of(
    st.integers(min_value=-3, max_value=70).map(str),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    _WORDS,
    _GARBAGE,
)


def _near(default: Any) -> st.SearchStrategy[str]:
    """Values near a key's default: scaled, shifted, negated, zero (valid or just not)."""
    if isinstance(default, bool) or default is None:
        return st.sampled_from(["true", "false", "null", "1", "2"])
    if isinstance(default, int | float):
        factors = st.sampled_from([1, 1, 2, 2, 4, 0.5, 0.25, 0, 10, 1e9, -1])
        shifted = st.tuples(factors, st.sampled_from([0, 0, 0, 1, -1])).map(
            lambda fs: default * fs[0] + fs[1]
        )
        return shifted.map(lambda v: str(int(v)) if isinstance(default, int) else repr(float(v)))
    if isinstance(default, list | ListConfig):
        return st.lists(st.sampled_from([str(v) for v in default] or ["1"]), max_size=3).map(
            lambda items: "[" + ",".join(items) + "]"
        )
    return st.one_of(_WORDS, _VALUES)


def _setting(defaults: dict[str, Any]) -> st.SearchStrategy[str]:
    """``key=value`` of a known key, the value near its default (mostly) or anything."""
    return st.sampled_from(sorted(defaults)).flatmap(
        lambda key: st.one_of(_near(defaults[key]), _near(defaults[key]), _VALUES).map(
            lambda value: f"{key}={value}"
        )
    )


def _override(
    defaults: dict[str, Any], groups: dict[str, tuple[str, ...]]
) -> st.SearchStrategy[str]:
    keys = sorted(defaults)
    near = _setting(defaults)
    misspelt = st.tuples(st.sampled_from(keys), _VALUES).map(lambda kv: f"{kv[0]}x={kv[1]}")
    added = st.tuples(st.sampled_from(keys), _VALUES).map(lambda kv: f"+{kv[0]}.extra={kv[1]}")
    chosen = st.sampled_from(sorted(groups)).flatmap(
        lambda group: st.one_of(st.sampled_from(groups[group]), _GARBAGE).map(
            lambda option: f"{group}={option}"
        )
    )
    kinds = {"near": near, "chosen": chosen, "misspelt": misspelt, "added": added}
    kinds["garbage"] = _GARBAGE
    weights = ["near"] * 6 + ["chosen"] * bool(groups) * 2 + ["misspelt", "added", "garbage"]
    return st.sampled_from(weights).flatmap(kinds.__getitem__)


_JOB_GROUPS = {"model": catalog.options("model"), "cluster": catalog.options("cluster")}


@contextlib.contextmanager
def _in_empty_folder() -> Iterator[str]:
    """An empty working folder (what a command writes lands in it, and is removed)."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(before)


def _refuse_constant(text: str) -> float:
    raise AssertionError(f"{text} is not JSON")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


@pytest.mark.slow  # fuzzing: a Hydra compose per example
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(overrides=st.lists(_override(CONFIG, _JOB_GROUPS), min_size=1, max_size=2))
def test_simulate_gives_finite_json_or_one_error_line(overrides: list[str]) -> None:
    # The hierarchical simulator imports torch and compiles layers: covered below, not here.
    overrides = [o for o in overrides if not o.startswith(("simulator=", "trace="))]
    main = importlib.import_module("autotune.simulate").main
    out, err = io.StringIO(), io.StringIO()
    with (
        _in_empty_folder() as folder,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        status = main([*SMALL, *overrides, "output=json"])
        written = [name for _, _, files in os.walk(folder) for name in files]
    assert written == []
    if status == 0:
        event("simulated")
        payload = json.loads(out.getvalue(), parse_constant=_refuse_constant)
        assert _finite(payload), payload
        assert payload["prediction"]["step_time_s"] > 0
        return
    event("refused")
    lines = err.getvalue().splitlines()
    assert status == 2, err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert [line for line in lines if line.startswith("error: ")] == lines[:1], lines
    assert all(line.startswith("  - ") for line in lines[1:]), lines  # a layout's broken rules


def _up_to_the_work(schema: type, overrides: list[str]) -> None:
    """What a command does before its work: compose, type, check, build specs or simulators."""
    config = load_config(schema, overrides)
    if isinstance(config, AutotuneConfig | ProfileConfig):
        job = catalog.job_from_config(config)
        layout = Layout.resolve(job.cluster.num_devices, **fixed_layout_values(config.parallel))
        if isinstance(config, ProfileConfig):
            layout.check(job)
    else:
        simulators_of(config)


_COMMANDS = st.one_of(
    st.tuples(
        st.just(AutotuneConfig),
        st.lists(_override(CONFIG, _JOB_GROUPS), min_size=1, max_size=2),
    ),
    st.tuples(
        st.just(BenchmarkConfig),
        st.lists(
            _override(BENCHMARK, {"simulator@simulator.analytical": ("analytical",)}), max_size=3
        ),
    ),
    st.tuples(
        st.just(ProfileConfig),
        st.lists(_override(PROFILE, _JOB_GROUPS), min_size=1, max_size=2),
    ),
)


@pytest.mark.slow  # fuzzing: a Hydra compose per example
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=_COMMANDS)
def test_search_benchmark_and_profile_settings_are_taken_or_refused(
    command: tuple[type, list[str]],
) -> None:
    schema, overrides = command
    base = [] if schema is BenchmarkConfig else SMALL
    with _in_empty_folder() as folder:
        try:
            _up_to_the_work(schema, [*base, *overrides])
        except UserError as exc:
            assert str(exc).strip(), "an error says what is wrong"
            event(f"{schema.__name__}: refused")
        else:
            event(f"{schema.__name__}: taken")
        written = [name for _, _, files in os.walk(folder) for name in files]
    assert written == []


_HIERARCHICAL_KEYS = _leaves(
    catalog.compose("job", ["simulator=hierarchical"]).simulator, "simulator."
)


@pytest.mark.slow  # fuzzing: a Hydra compose per example
@settings(max_examples=30, deadline=None)
@given(
    overrides=st.lists(
        _setting(HIERARCHICAL),
        min_size=1,
        max_size=3,
    )
)
def test_hierarchical_constants_are_taken_or_refused(overrides: list[str]) -> None:
    try:
        catalog.load_simulator("hierarchical", overrides)
    except UserError as exc:
        assert str(exc).strip()
        event("refused")
    else:
        event("taken")


def test_the_override_space_covers_every_group() -> None:
    prefixes = {key.split(".")[0] for key in CONFIG}
    assert {"model", "cluster", "train", "simulator", "search", "parallel", "tracking"} <= prefixes
    assert {"top_k", "bootstrap_samples", "oom_penalty_regret", "seed"} <= set(BENCHMARK)
    assert {"repeats", "limit", "out", "device"} <= set(PROFILE)
    assert isinstance(catalog.compose("config").search.micro_batch, ListConfig)
