"""Stand-ins for the NeMo 2.0 modules a recipe override imports, recording what it sets.

The written file runs as written (``__main__`` included) against these modules: a recipe
factory returns objects that accept only the fields NeMo's classes take (``_argrules.
NEMO_FIELDS``; ``sequence_parallelism`` on the strategy, a documented mistake, is refused),
``run.Config`` records its target and arguments, and ``run.run`` records the recipe it runs.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.autotune_tests._argrules import NEMO_FIELDS
from tests.autotune_tests._argrules import NEMO_RECIPE_MODEL_FIELDS

# NeMo 8cfedd72's recipe modules the override may name, with the keyword arguments their
# pretrain_recipe takes beyond dir, name, num_nodes and num_gpus_per_node.
RECIPE_EXTRAS: dict[str, frozenset[str]] = {
    **{
        name: frozenset()
        for name in (
            "llama2_7b llama3_8b llama31_70b llama31_405b mixtral_8x7b mixtral_8x22b "
            "qwen25_7b qwen25_14b qwen25_32b qwen25_72b qwen3_30b_a3b qwen3_235b_a22b "
            "deepseek_v2 deepseek_v2_lite gpt3_175b baichuan2_7b chatglm3_6b"
        ).split()
    },
    "deepseek_v3": frozenset({"use_mtp"}),
}

# The DDP config each recipe's trainer sets (NeMo 8cfedd72 nemo/collections/llm/recipes/: the
# llama*, mixtral_*, gpt3_175b, baichuan2_7b and chatglm3_6b files, qwen3.py and deepseek.py);
# qwen2.py's trainer sets none, so MegatronStrategy keeps its default, ddp="megatron".
_DDP = {
    "check_for_nan_in_grad": True,
    "grad_reduce_in_fp32": True,
    "overlap_grad_reduce": True,
    "overlap_param_gather": True,
    "average_in_collective": True,
}
_NO_AVERAGE = {k: v for k, v in _DDP.items() if k != "average_in_collective"}
_FSDP_READY = {**_DDP, "data_parallel_sharding_strategy": "optim_grads_params"}
RECIPE_DDP: dict[str, dict[str, Any] | None] = {
    **{name: None for name in ("qwen25_7b", "qwen25_14b", "qwen25_32b", "qwen25_72b")},
    **{name: _NO_AVERAGE for name in ("baichuan2_7b", "chatglm3_6b")},
    **{name: _FSDP_READY for name in ("llama3_8b", "qwen3_30b_a3b", "qwen3_235b_a22b")},
}


class Fields:
    """One NeMo object: only the fields of its ``kind`` (and ``extra``, a class's own) may be
    set; like fiddle's ``run.Config``, an unset field reads as its default (``defaults``)."""

    def __init__(
        self,
        kind: str,
        extra: frozenset[str] = frozenset(),
        defaults: dict[str, Any] | None = None,
        **values: Any,
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "allowed", NEMO_FIELDS[kind] | extra)
        object.__setattr__(self, "defaults", dict(defaults or {}))
        object.__setattr__(self, "values", dict(values))

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self.allowed:
            raise AttributeError(f"NeMo's {self.kind} has no field {name!r}")
        self.values[name] = value

    def __getattr__(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        if name in self.defaults:
            return self.defaults[name]
        raise AttributeError(name)


class Config:
    """``run.Config(target, **kwargs)`` as recorded; like fiddle's, it names its target
    ``__fn_or_cls__`` and takes the target's arguments as attributes."""

    def __init__(self, target: Any, **kwargs: Any) -> None:
        self.target, self.kwargs = target, kwargs

    @property
    def __fn_or_cls__(self) -> Any:
        return self.target

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("target", "kwargs"):
            object.__setattr__(self, name, value)
        else:
            self.kwargs[name] = value


class MegatronCommOverlapCallback:
    """NeMo's communication-overlap callback class, as a marker."""


class DistributedDataParallelConfig:
    """Megatron-Core's DDP config class, as a marker."""


def _recipe(recipe_name: str) -> types.SimpleNamespace:
    """``llm.<recipe_name>``: its pretrain_recipe factory, or AttributeError."""
    if recipe_name not in RECIPE_EXTRAS:
        raise AttributeError(f"nemo.collections.llm has no recipe {recipe_name!r}")

    def pretrain_recipe(
        *, dir: str, name: str, num_nodes: int, num_gpus_per_node: int, **extra: Any
    ) -> types.SimpleNamespace:
        unknown = set(extra) - RECIPE_EXTRAS[recipe_name]
        if unknown:
            raise TypeError(f"{recipe_name}.pretrain_recipe takes no {sorted(unknown)}")
        ddp = RECIPE_DDP.get(recipe_name, _DDP)
        strategy = Fields("strategy", defaults={"ddp": "megatron"})  # MegatronStrategy's
        if ddp is not None:
            strategy.ddp = Config(DistributedDataParallelConfig, **ddp)
        # DeepSeek-V3's recipe brings an overlap callback with TP overlap off (8cfedd72 L145)
        callbacks = (
            [Config(MegatronCommOverlapCallback, tp_comm_overlap=False)]
            if recipe_name == "deepseek_v3"
            else None
        )
        trainer = Fields(
            "trainer",
            strategy=strategy,
            num_nodes=num_nodes,
            devices=num_gpus_per_node,
            callbacks=callbacks,
        )
        return types.SimpleNamespace(
            factory=recipe_name,
            extra=extra,
            model=types.SimpleNamespace(
                config=Fields("model", NEMO_RECIPE_MODEL_FIELDS.get(recipe_name, frozenset()))
            ),
            trainer=trainer,
            data=Fields("data"),
            optim=types.SimpleNamespace(config=Fields("optim")),
        )

    return types.SimpleNamespace(pretrain_recipe=pretrain_recipe)


def _module(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for key, value in attributes.items():
        setattr(module, key, value)
    return module


@contextmanager
def nemo_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Install the stand-ins; yields the list ``run.run`` appends its recipes to."""
    ran: list[Any] = []

    def run(recipe: Any, direct: bool = False) -> None:
        assert direct, "the override trains in the torchrun worker (direct=True)"
        ran.append(recipe)

    llm = _module("nemo.collections.llm", __getattr__=_recipe)
    plugins = {
        name: (lambda name=name: Fields("plugin", factory=name))
        for name in ("bf16_mixed", "fp16_mixed", "bf16_with_fp8_mixed")
    }
    modules = {
        "nemo_run": _module("nemo_run", Config=Config, Partial=object, run=run),
        "megatron": _module("megatron"),
        "megatron.core": _module("megatron.core"),
        "megatron.core.distributed": _module(
            "megatron.core.distributed",
            DistributedDataParallelConfig=DistributedDataParallelConfig,
        ),
        "nemo": _module("nemo"),
        "nemo.lightning": _module("nemo.lightning", MegatronMixedPrecision=object),
        "nemo.lightning.pytorch": _module("nemo.lightning.pytorch"),
        "nemo.lightning.pytorch.callbacks": _module("nemo.lightning.pytorch.callbacks"),
        "nemo.lightning.pytorch.callbacks.megatron_comm_overlap": _module(
            "nemo.lightning.pytorch.callbacks.megatron_comm_overlap",
            MegatronCommOverlapCallback=MegatronCommOverlapCallback,
        ),
        "nemo.collections": _module("nemo.collections", llm=llm),
        "nemo.collections.llm": llm,
        "nemo.collections.llm.recipes": _module("nemo.collections.llm.recipes"),
        "nemo.collections.llm.recipes.precision": _module(
            "nemo.collections.llm.recipes.precision"
        ),
        "nemo.collections.llm.recipes.precision.mixed_precision": _module(
            "nemo.collections.llm.recipes.precision.mixed_precision", **plugins
        ),
    }
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    yield ran


def recorded(recipe: Any) -> dict[str, Any]:
    """The override's settings as plain dicts, for ``_launch_checks.nemo_problems``."""
    ddp = recipe.trainer.strategy.ddp
    assert isinstance(ddp, Config) and ddp.target is DistributedDataParallelConfig
    unknown = set(ddp.kwargs) - NEMO_FIELDS["ddp"]
    assert not unknown, f"DistributedDataParallelConfig has no {sorted(unknown)}"
    strategy = {k: v for k, v in recipe.trainer.strategy.values.items() if k != "ddp"}
    return {
        "strategy": strategy,
        "model": recipe.model.config.values,
        "data": recipe.data.values,
        "optim": recipe.optim.config.values,
        "ddp": ddp.kwargs,
        "trainer": {
            k: v for k, v in recipe.trainer.values.items() if k not in ("strategy", "callbacks")
        },
        "tp_comm_overlap": [
            c.kwargs.get("tp_comm_overlap")
            for c in recipe.trainer.callbacks or []
            if c.target is MegatronCommOverlapCallback
        ],
        "plugin": getattr(recipe.trainer.plugins, "values", {}),
    }
