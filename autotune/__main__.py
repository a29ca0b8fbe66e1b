"""``python -m autotune``: search the layouts of a model on a cluster and print the best."""

from __future__ import annotations

import sys

from autotune.cli import Command
from autotune.config import AutotuneConfig
from autotune.search import run_search_job

COMMAND = Command(
    module="autotune",
    config_name="config",
    schema=AutotuneConfig,
    summary=(
        "Search the parallel layouts (dp, tp, pp, cp, ep, vpp, micro-batch, recompute,\n"
        "optimizer sharding) of a model on a cluster with a simulator as the objective; print\n"
        "the best layouts, where their step time goes, and the flags that launch the best one.\n"
        "Progress goes to stderr; the search is recorded in MLflow (tracking.*)."
    ),
    options=(
        ("model", "a model of conf/model/"),
        ("cluster", "a cluster of conf/cluster/"),
        ("cluster.num_nodes", "nodes of the cluster"),
        ("train.seq_len", "tokens per sequence"),
        ("train.global_batch_size", "sequences per step"),
        ("train.framework", "a framework of conf/framework/ (unset: the cluster's)"),
        ("train.precision", "bf16, fp16, fp32 or fp8"),
        ("train.dropout", "dropout probability (unset: the model's recipe)"),
        ("simulator", "analytical or hierarchical"),
        ("search.sampler", "grid, screen, tpe, gp, random or nsga2 (auto: grid, screen or tpe)"),
        ("search.n_trials", "trials of the study"),
        ("search.seed", "sampler seed"),
        ("search.storage", "Optuna storage URL to resume or share a study"),
        ("parallel.<field>", "pin a layout field, e.g. parallel.tp=8"),
        ("output", "table or json"),
        ("tracking.enabled", "record the search in MLflow"),
        ("tracking.uri", "MLflow tracking URI"),
    ),
    examples=(
        "python -m autotune model=llama70b cluster=ascend",
        "python -m autotune model=mixtral_8x7b cluster=h100 cluster.num_nodes=16",
        "python -m autotune model=llama3_8b cluster=a100 parallel.tp=8 output=json",
    ),
    run=run_search_job,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
