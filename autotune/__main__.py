"""``python -m autotune``: search the layouts of a model on a cluster and print the best."""

from __future__ import annotations

import sys

from autotune.cli import Command
from autotune.cli import job_inputs
from autotune.config import AutotuneConfig
from autotune.search import run_search_job
from autotune.search import search_outputs

COMMAND = Command(
    module="autotune",
    config_name="config",
    schema=AutotuneConfig,
    summary=(
        "Search the parallel layouts (dp, tp, pp, cp, ep, vpp, micro-batch, recompute,\n"
        "optimizer sharding) of a model on a cluster with a simulator as the objective; print\n"
        "the best layouts, where their step time goes, and the flags that launch the best one.\n"
        "Progress goes to stderr; the search is recorded in MLflow (tracking.*).\n"
        "Installed, the same is `autotune [key=value ...]`; `autotune simulate|benchmark|\n"
        "calibrate|profile ...` runs python -m autotune.<command>."
    ),
    options=(
        ("model", "a model of conf/model/"),
        ("cluster", "a cluster of conf/cluster/"),
        ("cluster.num_nodes", "nodes of the cluster"),
        ("train.seq_len", "tokens per sequence"),
        ("train.global_batch_size", "sequences per step"),
        ("train.framework", "a framework of conf/framework/ (unset: the cluster's)"),
        ("framework.release", "its release the launch flags are for (unset: the yaml's)"),
        ("train.precision", "bf16, fp16, fp32 or fp8"),
        ("train.grad_reduce_in_fp32", "fp32 gradients; false: bf16 (unset: the framework's)"),
        ("train.tp_comm_overlap", "TP collectives behind the GEMMs (unset: the framework's)"),
        ("train.cp_comm_type", "p2p (ring) or a2a (Ulysses) (unset: the framework's)"),
        ("train.dropout", "dropout probability (unset: the model's recipe)"),
        ("train.<setting>", "flash_attention, overlap_grad_reduce, moe_dispatcher, ..."),
        ("simulator", "the simulator that prices a layout (Simulators: below)"),
        ("calibration", "a calibration: NAME of ./calibrations/ or ./PATH.yaml"),
        ("search.sampler", "grid, screen, tpe, gp, random or nsga2 (auto: grid, screen or tpe)"),
        ("search.n_trials", "trials of the study"),
        ("search.seed", "sampler seed"),
        ("search.top_k", "layouts shown and launched"),
        ("search.workers", "processes that sample the study (and re-rank)"),
        ("search.storage", "Optuna storage URL to resume or share a study"),
        ("search.study_name", "the study's name (unset: model-cluster-nodes-simulator-mode)"),
        ("search.rerank", "a finer simulator that re-prices the best search.rerank_top"),
        ("search.memory_margin", "a fit keeps this share of memory free (unset: derived)"),
        ("search.zero_stages", "ZeRO stages beyond the optimizer's also tried, e.g. [2,3]"),
        ("search.max_dp_replicate", "replicas of the sharded states at most (hybrid sharding)"),
        ("parallel.<field>", "pin a layout field, e.g. parallel.tp=8"),
        ("launch_dir", "launch files (rank-N/) and config.yaml of the search; null: none"),
        ("probes", "end with this many layouts to measure, and a CSV to fill in"),
        ("probes_out", "the CSV of layouts to measure"),
        ("measured", "the filled-in CSV: learn from it, re-rank, pick"),
        ("calibrate.stop_gain", "probes stop when none likely beats the best by this share"),
        ("calibrate.stop_probability", "likely: a chance above this that any one does"),
        ("output", "table or json"),
        ("tracking.enabled", "record the search in MLflow"),
        ("tracking.uri", "MLflow tracking URI"),
        ("tracking.experiment", "MLflow experiment"),
    ),
    examples=(
        "python -m autotune model=llama70b cluster=ascend",
        "python -m autotune model=mixtral_8x7b cluster=h100 cluster.num_nodes=16",
        "python -m autotune model=llama3_8b cluster=a100 parallel.tp=8 output=json",
        "python -m autotune -m model=llama2_7b,llama3_8b search.n_trials=10,20 search.sampler=tpe",
    ),
    run=run_search_job,
    outputs=search_outputs,
    inputs=job_inputs,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
