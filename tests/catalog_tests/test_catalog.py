"""Every model and cluster yaml composes, builds specs, and carries its sources.

Published sizes are the totals (and, for MoE, active parameters) of the derived parameter check
in docs/reference.md 2, which agree with the model cards.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from autotune import catalog
from autotune.catalog import _compose
from autotune.simulators import UserError

CONF = catalog.conf_dir()
MODELS = sorted(p.stem for p in (CONF / "model").glob("*.yaml"))
CLUSTERS = sorted(p.stem for p in (CONF / "cluster").glob("*.yaml"))

# Total parameters in billions (docs/reference.md 2, "Derived parameter check").
PUBLISHED_B = {
    "llama2_7b": 6.74,
    "llama2_13b": 13.02,
    "llama2_70b": 68.98,
    "llama3_8b": 8.03,
    "llama3_70b": 70.55,
    "llama3_405b": 405.85,
    "qwen2_5_7b": 7.62,
    "qwen2_5_14b": 14.77,
    "qwen2_5_32b": 32.76,
    "qwen2_5_72b": 72.71,
    "mixtral_8x7b": 46.7,
    "mixtral_8x22b": 140.6,
    "qwen3_30b_a3b": 30.5,
    "qwen3_235b_a22b": 235.1,
    "deepseek_v2_lite": 15.7,
    "deepseek_v2": 235.7,
    "deepseek_v3": 671.0,
    "gpt3_175b": 174.6,
    "baichuan2_7b": 7.51,
    "baichuan2_13b": 13.90,
    "chatglm3_6b": 6.24,
    "glm4_9b": 9.40,
    "internlm2_7b": 7.74,
    "internlm2_20b": 19.86,
    "nemotron4_15b": 15.7,
    "nemotron4_340b": 340.0,
}
# Active parameters per token in billions, where docs/reference.md 2 lists them.
PUBLISHED_ACTIVE_B = {
    "mixtral_8x7b": 12.9,
    "mixtral_8x22b": 39.2,
    "qwen3_30b_a3b": 3.35,
    "qwen3_235b_a22b": 22.2,
    "deepseek_v2": 21.4,
    "deepseek_v3": 37.6,
}
# Short names: `model=<alias>` is the same architecture as the full name.
ALIASES = {
    "llama70b": "llama3_70b",
    "llama405b": "llama3_405b",
    "mixtral8x7b": "mixtral_8x7b",
    "deepseekv3": "deepseek_v3",
}
REQUIRED_CLUSTERS = (
    "ascend",
    "ascend910",
    "a100",
    "a100_40g",
    "h100",
    "h200",
    "b200",
    "gb200",
    "v100",
)

# A figure is a numeric value; it needs `# source:` on its line. Names, booleans, strings
# (activation, norm, topology) and the defaults list are not figures and are exempt.
_FIGURE = re.compile(
    r"^\s*[A-Za-z_][A-Za-z0-9_]*:\s*[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?\s*(#|$)"
)


def test_catalog_has_every_required_name() -> None:
    missing = sorted((set(PUBLISHED_B) | set(ALIASES)) - set(MODELS))
    assert not missing, f"conf/model lacks {missing}"
    assert not sorted(set(REQUIRED_CLUSTERS) - set(CLUSTERS))
    unknown = sorted(set(MODELS) - set(PUBLISHED_B) - set(ALIASES))
    assert not unknown, f"add the published size of {unknown} to PUBLISHED_B"


@pytest.mark.parametrize("name", MODELS)
def test_model_params_match_published(name: str) -> None:
    job = catalog.load_job(name, "ascend")
    model, train = job.model, job.train
    key = ALIASES.get(name, name)
    assert model.num_params / 1e9 == pytest.approx(PUBLISHED_B[key], rel=0.01)
    if key in PUBLISHED_ACTIVE_B:
        assert model.num_active_params / 1e9 == pytest.approx(PUBLISHED_ACTIVE_B[key], rel=0.01)
    assert train.tokens_per_step > 0  # the recipe fills train.seq_len / global_batch_size


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_alias_is_its_target(alias: str) -> None:
    assert catalog.load_model(alias) == catalog.load_model(ALIASES[alias])


@pytest.mark.parametrize("name", CLUSTERS)
def test_cluster_builds_specs(name: str) -> None:
    cluster = catalog.load_cluster(name)
    assert cluster.name == name  # the `cluster` column of a measurement file names this file
    assert cluster.num_devices == cluster.devices_per_node * cluster.num_nodes > 0
    assert cluster.device.peak_flops("bf16") > 0  # bf16 falls back to fp16 where there is none
    for members in (2, cluster.devices_per_node):
        assert 0 < cluster.intra_node.group_bandwidth_gbps(members)


@pytest.mark.parametrize(
    "path",
    sorted((CONF / "model").glob("*.yaml")) + sorted((CONF / "cluster").glob("*.yaml")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_every_figure_has_a_source(path: Path) -> None:
    lines = path.read_text().splitlines()
    unsourced = [
        f"{path.name}:{i}: {line.strip()}"
        for i, line in enumerate(lines, 1)
        if _FIGURE.match(line) and "# source:" not in line
    ]
    assert not unsourced, "figures without '# source:':\n" + "\n".join(unsourced)


def test_figure_pattern() -> None:
    assert _FIGURE.match("  bf16_tflops: 353.9  # source: x")
    assert _FIGURE.match("num_layers: 32")
    assert not _FIGURE.match("name: Llama-2-7B")
    assert not _FIGURE.match("qkv_bias: true")
    assert not _FIGURE.match("  - llama3_70b")


def test_misspelt_override_is_refused() -> None:
    with pytest.raises(UserError, match="unknown key 'model.layerz'; allowed there: .*num_layers"):
        catalog.load_model("llama2_7b", ["model.layerz=3"])


def test_appended_unknown_key_is_refused() -> None:
    # Hydra's `+key=value` force-adds even into a structured node; compose still refuses it.
    with pytest.raises(UserError, match=r"unknown key\(s\) model.layerz \(allowed: .*num_layers"):
        catalog.load_model("llama2_7b", ["+model.layerz=3"])


def test_unknown_model_lists_the_catalog() -> None:
    with pytest.raises(UserError, match=r"unknown model 'nope'; available: .*llama2_70b"):
        catalog.load_model("nope")


def test_schemas_are_not_offered_as_options() -> None:
    assert "schema" not in catalog.options("model")
    with pytest.raises(UserError, match="unknown model 'schema'"):
        catalog.load_model("schema")


def test_unknown_key_in_a_model_yaml_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    (conf / "model" / "typo.yaml").write_text(
        "defaults:\n  - llama2_7b\n  - _self_\n\nlayerz: 3  # source: a typo\n"
    )
    monkeypatch.setattr(_compose, "conf_dir", lambda: conf)
    with pytest.raises(UserError, match="layerz"):
        catalog.compose("job", ["model=typo"])
