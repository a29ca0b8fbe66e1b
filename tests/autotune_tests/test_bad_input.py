"""Every bad input, in every command, ends as one ``error:`` line with exit status 2.

Each case runs the command's ``main`` in this process (fast) from an empty folder, with MLflow
pointed into it, and asserts what a user sees: exit status 2, exactly one line that starts with
``error: `` (a layout that breaks several rules lists them below it), the words that say what
is wrong, no traceback, and nothing written, not even a folder (so no MLflow run, RUNNING or
otherwise). A few cases run as real processes to prove the exit status and the single line on
stderr.

The cases are grouped by where the value enters: Hydra's own refusals (``catalog.compose``),
the specs' ``__post_init__`` (model, cluster, train, layout), the simulators' and frameworks'
constants, and each command's ``check()`` (search, tracking, benchmark, profile, paths). The
default run takes the first case of each group for each command; the rest are marked ``slow``.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.dataset_tests._tables import write

REPO = Path(__file__).resolve().parents[2]
MAINS = {
    "search": "autotune.__main__",
    "simulate": "autotune.simulate",
    "benchmark": "autotune.benchmark.__main__",
    "profile": "autotune.profile",
    "calibrate": "autotune.calibrate.__main__",
}
SMALL = ("model=llama2_7b", "cluster=ascend", "cluster.num_nodes=1")
DATA = "{data}"  # replaced by the path of a small valid measurement file

# (command, overrides, words the error must contain)
HYDRA = [
    ("simulate", ["model.layerz=3"], "unknown key 'model.layerz'; allowed there: "),
    ("simulate", ["+model.layerz=3"], "unknown key(s) model.layerz (allowed: "),
    ("simulate", ["++model.layerz=3"], "unknown key(s) model.layerz"),
    ("simulate", ["cluster.device.hbm=3"], "; allowed there: bf16_tflops, fp16_tflops"),
    # a key under a key that holds one value (OmegaConf would say "Cannot convert 'dict'")
    (
        "simulate",
        ["train.framework.rope_kernel=halves"],
        "train.framework holds one value and no keys, so 'train.framework.rope_kernel' names "
        "nothing; write train.framework=VALUE (one of megatron_core, megatron_deepspeed,",
    ),
    ("simulate", ["+model.num_layers.x=1"], "model.num_layers holds one value and no keys"),
    ("search", ["search.n_trials.x=3"], "search.n_trials holds one value and no keys"),
    (
        "simulate",
        ["parallel.tpp=2"],
        "allowed there: cp, distributed_optimizer, dp, dp_replicate, ep, etp, layer_split",
    ),
    ("simulate", ["model=schema"], "unknown model 'schema'; available: "),
    ("simulate", ["model=nope"], "unknown model 'nope'; available: "),
    ("simulate", ["model="], "unknown model ''"),
    ("simulate", ["model=../job"], "unknown model '../job'; available: "),
    ("simulate", ["cluster=../model/llama2_7b"], "unknown cluster '../model/llama2_7b'"),
    ("simulate", ["simulator=../model/llama2_7b"], "unknown simulator '../model/llama2_7b'"),
    ("simulate", ["cluster=nope"], "unknown cluster 'nope'; available: a100"),
    ("simulate", ["train=nope"], "unknown train 'nope'; available: default"),
    ("simulate", ["simulator=nope"], "unknown simulator 'nope'; available: analytical"),
    ("simulate", ["model.num_layers=abc"], "model.num_layers=abc"),
    ("simulate", ["model.num_layers=1.5"], "model.num_layers=1.5: '1.5' is not an integer"),
    ("simulate", ["model.num_layers=true"], "'True' is not an integer"),
    ("simulate", ["model.num_layers=null"], "is not Optional"),
    ("simulate", ["model.name=null"], "is not Optional"),
    ("simulate", ["cluster.num_nodes=1e9"], "cluster.num_nodes=1e9"),
    ("simulate", ["cluster.num_nodes="], "cluster.num_nodes="),
    ("simulate", ["cluster.device.memory_gib=lots"], "memory_gib=lots: 'lots' is not a number"),
    ("simulate", ["train.flash_attention=maybe"], "'maybe' is not true or false"),
    ("simulate", ["train.tp_comm_overlap=maybe"], "'maybe' is not true or false"),
    ("simulate", ["train.grad_reduce_in_fp32=[1]"], "'[1]' is not true or false"),
    ("simulate", ["train.overlap_grad_reduce=maybe"], "'maybe' is not true or false"),
    (
        "simulate",
        ["train.framework=megatron_deepspeed", "train.overlap_grad_reduce=true"],
        "framework 'megatron_deepspeed' reduces them after the pipeline (use false)",
    ),
    (
        "simulate",
        ["train.overlap_param_gather=true"],  # MindSpeed, the ascend default, leaves both off
        "overlap_param_gather needs overlap_grad_reduce",
    ),
    ("simulate", ["train.moe_dispatcher=nccl"], "moe_dispatcher='nccl' is not one of alltoall"),
    (
        "simulate",
        ["train.moe_dispatcher=deepep"],
        "framework 'mindspeed'; it has alltoall, allgather",
    ),
    ("simulate", ["train.cp_comm_type=ring"], "cp_comm_type='ring' is not one of p2p, a2a"),
    ("simulate", ["train.dropout=1.5"], "dropout=1.5 must be a probability in [0, 1)"),
    ("simulate", ["train.dropout=-0.1"], "dropout=-0.1 must be a probability in [0, 1)"),
    ("simulate", ["train.dropout=1"], "dropout=1.0 must be a probability in [0, 1)"),
    ("search", ["train.dropout=lots"], "dropout"),
    (
        "simulate",
        ["train.framework=megatron_lm", "train.cp_comm_type=a2a"],
        "not run by framework 'megatron_lm' (it has no context parallelism)",
    ),
    (
        "simulate",
        ["train.framework=megatron_core", "train.cp_comm_type=a2a", "parallel.tp=8"]
        + ["parallel.cp=8", "cluster.num_nodes=8"],
        "needs cp to divide the 4 attention heads per TP rank",
    ),
    ("simulate", ["parallel.tp=abc"], "parallel.tp=abc"),
    ("simulate", ["parallel.layer_split=5"], "is not a ListConfig"),
    ("simulate", ["parallel.layer_split=[1,2,a]"], "'a' is not an integer"),
    ("simulate", ["parallel.sequence_parallel=maybe"], "'maybe' is not true or false"),
    ("simulate", ["parallel.tp=["], "cannot parse the override 'parallel.tp=['"),
    ("simulate", ["parallel.tp='"], "cannot parse the override"),
    ("simulate", ["model==x"], "cannot parse the override 'model==x'"),
    ("simulate", ["model"], "cannot parse the override 'model': missing EQUAL"),
    # a character Hydra's lexer has no token for, said with its code point and what is allowed
    (
        "simulate",
        ["parallel.tp=\u0668"],
        "'\u0668' (U+0668) at position 13 cannot be parsed: keys",
    ),
    ("simulate", ["model.name=\u00f1and\u00fa"], "(U+00F1) at position 12 cannot be parsed"),
    ("simulate", ["model\u200b=llama2_7b"], "(U+200B) at position 6 cannot be parsed"),
    ("search", ["parallel.tp=1\x01"], "'\\x01' (U+0001) at position 14 cannot be parsed"),
    # a config group takes one option: Hydra would merge a list of them into one config
    ("simulate", ["cluster=[a100,h100]"], "'cluster=[a100,h100]' gives a list; cluster takes one"),
    ("simulate", ["model=[]"], "'model=[]' gives a list; model takes one of baichuan2_13b"),
    ("benchmark", ["simulator@simulator.analytical=[analytical]"], "gives a list; simulator"),
    ("simulate", ["=3"], "cannot parse the override '=3': it names no key"),
    ("simulate", ["+="], "cannot parse the override '+=': it names no key"),
    ("search", ["~@x"], "cannot parse the override '~@x': it names no key"),
    ("simulate", ["~model"], "model.name= is required and has no default"),
    ("simulate", ["--verbose"], "unknown option '--verbose'"),
    ("simulate", ["model.num_layers=${nope}"], "nope"),
    ("search", ["search.seed=abc"], "search.seed=abc"),
    ("search", ["search.seed=1.5"], "'1.5' is not an integer"),
    ("search", ["search.micro_batch=5"], "is not a ListConfig"),
    ("search", ["search.distributed_optimizer=[maybe]"], "'maybe' is not true or false"),
    ("search", ["tracking.enabled=maybe"], "'maybe' is not true or false"),
    ("search", ["search.samplr=tpe"], "unknown key 'search.samplr'; allowed there: "),
    ("benchmark", ["top_k=abc"], "top_k=abc"),
    ("benchmark", ["peers=maybe"], "'maybe' is not true or false"),
    ("benchmark", ["simulator@simulator.analytical=nope"], "unknown simulator 'nope'"),
    ("benchmark", ["simulator.analytical=nope"], "Cannot assign str to Dict"),
    ("benchmark", ["+nope=1"], "nope"),
    ("profile", ["repeats=abc"], "repeats=abc"),
    ("profile", ["limit=abc"], "limit=abc"),
    ("profile", ["model.layerz=3"], "unknown key 'model.layerz'"),
    ("profile", ["model=nope"], "unknown model 'nope'"),
    ("profile", ["parallel.tp=abc"], "parallel.tp=abc"),
    ("profile", ["-x"], "unknown option '-x'"),
]
# Hydra's flags, sweeps and hydra.* keys (autotune/_command_line.py, autotune/catalog/_hydra.py): a
# refusal while the jobs of a sweep are planned names the job, and no job has run.
SWEEP = "gives several values (a sweep): add -m (--multirun)"
NOT_HYDRA = "is not supported: these commands compose their config with Hydra's compose API"
FLAGS = [
    ("simulate", ["model=llama2_7b,llama3_8b"], f"'model=llama2_7b,llama3_8b' {SWEEP}"),
    ("search", ["search.n_trials=range(1,3)"], SWEEP),
    ("search", ["--cfg", "parallel.tp=1,2"], SWEEP),
    ("benchmark", ["--info", "seed=choice(1,2)"], SWEEP),
    ("search", ["hydra.run.dir=/tmp/x"], f"hydra.run.dir {NOT_HYDRA}"),
    ("search", ["hydra.sweep.dir=sweeps"], "the hydra keys they take: hydra.searchpath"),
    ("simulate", ["+hydra.job.chdir=true"], f"hydra.job.chdir {NOT_HYDRA}"),
    ("benchmark", ["hydra/launcher=basic"], f"hydra/launcher {NOT_HYDRA}"),
    ("profile", ["hydra.verbose=true"], f"hydra.verbose {NOT_HYDRA}"),
    ("calibrate", [f"data={DATA}", "name=x", "hydra.output_subdir=null"], NOT_HYDRA),
    ("simulate", ["--cfg", "jobb"], "--cfg takes job, all or hydra (or nothing: job), not 'jobb'"),
    ("search", ["--cfg", "hydra"], "--cfg hydra: these commands compose their config with"),
    ("benchmark", ["--cfg=hydra"], "which has no Hydra runtime config"),
    ("simulate", ["--info", "plugins"], "--info takes all, searchpath, groups or defaults"),
    ("search", ["--cfg", "--info"], "--cfg and --info each print instead of running"),
    ("search", ["-m=1"], "-m takes no value"),
    ("simulate", ["-m", "model=llama2_7b,"], "cannot parse the override 'model=llama2_7b,'"),
    ("search", ["-m", "search.n_trials=interval(1,2)"], "cannot sweep 'search.n_trials=interval"),
    ("simulate", ["-m", "model=glob(nomodel*)"], "the sweep 'model=glob(nomodel*)' has no value"),
    ("search", ["-m", "search.seed=range(0,5000)"], "makes more than 1,000 jobs"),
    ("search", ["-m", "search.seed=1,-1"], "[2/2] search.seed=-1: search.seed=-1 must be from 0"),
    ("profile", ["-m", "repeats=1,0"], "[2/2] repeats=0: repeats=0 must be from 1"),
    ("simulate", ["-m", "--info", "model=llama2_7b,nope"], "[2/2] model=nope: unknown model"),
    (
        "benchmark",
        ["-m", "report_dir=/dev/null,r"],
        "[1/2] report_dir=/dev/null: report_dir='/dev/null' is a device",
    ),
]
MODEL = [
    ("simulate", ["model.num_layers=0"], "num_layers=0 must be > 0"),
    ("simulate", ["model.num_layers=-3"], "num_layers=-3 must be > 0"),
    ("simulate", ["model.num_layers=1000000000"], "num_layers=1000000000 must be <= 10,000"),
    ("simulate", ["model.hidden_size=0"], "hidden_size=0 must be > 0"),
    ("simulate", ["model.hidden_size=4097"], "heads=32 must divide hidden_size=4097"),
    ("simulate", ["model.hidden_size=2000000"], "hidden_size=2000000 must be <= 1,048,576"),
    ("simulate", ["model.ffn_hidden_size=0"], "ffn_hidden_size=0 must be > 0"),
    ("simulate", ["model.ffn_hidden_size=-1"], "ffn_hidden_size=-1 must be >= 0"),
    ("simulate", ["model.num_attention_heads=0"], "num_attention_heads=0 must be > 0"),
    ("simulate", ["model.num_attention_heads=30"], "num_attention_heads=30 must divide"),
    ("simulate", ["model.num_kv_heads=0"], "num_kv_heads=0 must be > 0"),
    ("simulate", ["model.num_kv_heads=3"], "num_kv_heads=3 must divide num_attention_heads=32"),
    ("simulate", ["model.num_kv_heads=64"], "num_kv_heads=64 must divide"),
    ("simulate", ["model.head_dim=0"], "head_dim=0 must be > 0"),
    ("simulate", ["model.vocab_size=0"], "vocab_size=0 must be > 0"),
    ("simulate", ["model.vocab_size=100000000"], "vocab_size=100000000 must be <= 10,000,000"),
    ("simulate", ["model.num_experts=-1"], "num_experts=-1 must be >= 0"),
    ("simulate", ["model.moe_top_k=-1"], "moe_top_k=-1 must be >= 0"),
    ("simulate", ["model.moe_top_k=2"], "moe_top_k=2 must be 0 with num_experts=0"),
    ("simulate", ["model.expert_ffn_hidden_size=512"], "expert_ffn_hidden_size=512 must be 0"),
    ("simulate", ["model.first_dense_layers=2"], "first_dense_layers=2 must be 0"),
    ("simulate", ["model.first_dense_layers=-1"], "first_dense_layers=-1 must be >= 0"),
    ("simulate", ["model.num_experts=8"], "moe_top_k=0, expert_ffn_hidden_size=0 must be > 0"),
    (
        "simulate",
        ["model.num_experts=8", "model.moe_top_k=9", "model.expert_ffn_hidden_size=512"],
        "moe_top_k=9 exceeds num_experts=8",
    ),
    ("simulate", ["model=mixtral_8x7b", "model.moe_top_k=0"], "moe_top_k=0"),
    ("simulate", ["model=mixtral_8x7b", "model.moe_top_k=9"], "moe_top_k=9 exceeds num_experts=8"),
    ("simulate", ["model=mixtral_8x7b", "model.num_experts=2000000"], "must be <= 1,048,576"),
    (
        "simulate",
        ["model=deepseek_v2_lite", "model.first_dense_layers=100"],
        "first_dense_layers=100 exceeds num_layers",
    ),
    ("simulate", ["model.activation=relu"], "activation='relu' is not one of swiglu, gelu"),
    ("simulate", ["model.norm=batchnorm"], "norm='batchnorm' is not one of rmsnorm, layernorm"),
    ("simulate", ["model.attention=linear"], "attention='linear' is not one of gqa, mla"),
    ("simulate", ["model.attention=mla"], "kv_lora_rank=0, qk_nope_head_dim=0"),
    ("simulate", ["model.q_lora_rank=64"], "q_lora_rank=64 must be 0 with attention='gqa'"),
    ("simulate", ["model.v_head_dim=-1"], "v_head_dim=-1 must be >= 0"),
    ("search", ["model.num_layers=20000"], "num_layers=20000 must be <= 10,000"),
    ("profile", ["model.hidden_size=-4096"], "hidden_size=-4096 must be > 0"),
    # the model card (autotune.simulators.model_card)
    ("simulate", ["model.rotary_base=0"], "rotary_base=0 must be > 0"),
    ("simulate", ["model.rotary_base=10000000000000"], "must be <= 1,000,000,000,000"),
    ("simulate", ["model.rotary_percent=1.5"], "rotary_percent=1.5 must be <= 1"),
    ("simulate", ["model.norm_epsilon=0"], "norm_epsilon=0.0 must be > 0"),
    ("simulate", ["model.norm_epsilon=0.5"], "norm_epsilon=0.5 must be <= 0.1"),
    (
        "simulate",
        ["model.position_embedding=sinusoid"],
        "position_embedding='sinusoid' is not one of rope, alibi, learned_absolute",
    ),
    (
        "simulate",
        ["model.position_embedding=alibi", "model.rotary_base=500000"],
        "rotary_base=500000 (default 10000) must keep the default with position_embedding",
    ),
    ("simulate", ["model.rope_scaling=ntk"], "rope_scaling='ntk' is not one of none, llama3"),
    ("simulate", ["model.rope_scaling=llama3"], "rope_original_max_positions=0 must be > 0"),
    (
        "simulate",
        ["model.rope_scaling_factor=8"],
        "rope_scaling_factor=8.0 (default 1.0) must keep the default with rope_scaling='none'",
    ),
    (
        "simulate",
        ["model=deepseek_v3", "model.rope_beta_slow=64"],
        "rope_beta_slow=64.0 must be below rope_beta_fast=32.0",
    ),
    (
        "simulate",
        ["model=deepseek_v2_lite", "model.qk_layernorm=true"],
        "qk_layernorm is the per-head query/key norm of gqa attention",
    ),
    (
        "simulate",
        ["model.moe_router_num_groups=8"],
        "moe_router_num_groups=8 (default 0) must keep the default with num_experts=0",
    ),
    (
        "simulate",
        ["model=mixtral_8x7b", "model.moe_router_score_function=relu"],
        "moe_router_score_function='relu' is not one of softmax, sigmoid",
    ),
    (
        "simulate",
        ["model=mixtral_8x7b", "model.moe_router_num_groups=4"],
        "set both (group-limited top-k) or neither",
    ),
    (
        "simulate",
        ["model=mixtral_8x7b", "model.moe_router_num_groups=3", "model.moe_router_group_topk=1"],
        "moe_router_num_groups=3 must divide num_experts=8",
    ),
    (
        "simulate",
        ["model=mixtral_8x7b", "model.moe_router_num_groups=8", "model.moe_router_group_topk=1"],
        "moe_top_k=2 exceeds the experts of the moe_router_group_topk=1 groups picked (1 each)",
    ),
    (
        "simulate",
        ["model=mixtral_8x7b", "model.moe_router_expert_bias=true"],
        "moe_router_expert_bias (aux-loss-free routing) biases sigmoid scores",
    ),
]
CLUSTER = [
    ("simulate", ["cluster.num_nodes=0"], "num_nodes=0 must be > 0"),
    ("simulate", ["cluster.num_nodes=-2"], "num_nodes=-2 must be > 0"),
    ("simulate", ["cluster.num_nodes=1000000000"], "8,000,000,000 devices; at most 1,048,576"),
    ("search", ["cluster.num_nodes=1000000000"], "8,000,000,000 devices; at most 1,048,576"),
    ("simulate", ["cluster.devices_per_node=0"], "devices_per_node=0 must be > 0"),
    ("simulate", ["cluster.devices_per_node=2000000"], "2,000,000 devices; at most"),
    ("simulate", ["cluster.default_framework=nope"], "unknown framework 'nope'"),
    ("simulate", ["cluster.device.memory_gib=inf"], "memory_gib=inf must be <= 100,000"),
    ("simulate", ["cluster.device.memory_gib=nan"], "memory_gib=nan must be > 0"),
    ("simulate", ["cluster.device.memory_gib=0"], "memory_gib=0.0 must be > 0"),
    ("simulate", ["cluster.device.memory_gib=-64"], "memory_gib=-64.0 must be > 0"),
    ("simulate", ["cluster.device.memory_gib=1e308"], "memory_gib=1e+308 must be <= 100,000"),
    ("simulate", ["cluster.device.memory_gbps=inf"], "memory_gbps=inf must be <= 1,000,000"),
    ("simulate", ["cluster.device.memory_gbps=0"], "memory_gbps=0.0 must be > 0"),
    ("simulate", ["cluster.device.bf16_tflops=inf"], "bf16_tflops=inf must be <= 100,000"),
    ("simulate", ["cluster.device.bf16_tflops=-1"], "bf16_tflops=-1.0 must be >= 0"),
    ("simulate", ["cluster.device.fp16_tflops=nan"], "fp16_tflops=nan must be > 0"),
    ("simulate", ["cluster.device.fp16_tflops=0"], "fp16_tflops=0.0 must be > 0"),
    ("simulate", ["cluster.device.fp32_tflops=-inf"], "fp32_tflops=-inf must be > 0"),
    ("simulate", ["cluster.device.fp8_tflops=-1"], "fp8_tflops=-1.0 must be >= 0"),
    ("simulate", ["cluster.device.fp8_weight_copies=-1"], "fp8_weight_copies=-1 must be >= 0"),
    ("simulate", ["cluster.device.fp8_weight_copies=7"], "fp8_weight_copies=7 must be <= 2"),
    (
        "simulate",
        ["cluster.device.matmul_efficiency=5"],
        "matmul_efficiency=5.0 must be from 0.01",
    ),
    (
        "simulate",
        ["cluster.device.matmul_efficiency=0"],
        "matmul_efficiency=0.0 must be from 0.01",
    ),
    (
        "simulate",
        ["cluster.device.matmul_efficiency=nan"],
        "matmul_efficiency=nan must be from 0.01",
    ),
    (
        "simulate",
        ["cluster.device.memory_efficiency=1.5"],
        "memory_efficiency=1.5 must be from 0.01",
    ),
    (
        "simulate",
        ["cluster.device.fp8_matmul_efficiency=0.5"],  # Ascend: no FP8 tensor cores
        "fp8_matmul_efficiency is set but the device has no FP8 tensor cores",
    ),
    (
        "simulate",
        ["cluster=h100", "cluster.device.fp8_matmul_efficiency=1.5"],
        "fp8_matmul_efficiency=1.5 must be from 0.01 to 1",
    ),
    (
        "simulate",
        ["cluster=h100", "cluster.device.fp8_matmul_efficiency=nan"],
        "fp8_matmul_efficiency=nan must be from 0.01 to 1",
    ),
    ("simulate", ["cluster.fitted_on=dgxc"], "str is not a ListConfig, list or tuple"),
    (
        "simulate",
        ["cluster.device.memory_efficiency=-0.4"],
        "memory_efficiency=-0.4 must be from 0.01",
    ),
    ("simulate", ["cluster.intra_node.bandwidth_gbps=inf"], "bandwidth_gbps=inf must be <="),
    ("simulate", ["cluster.intra_node.bandwidth_gbps=0"], "bandwidth_gbps=0.0 must be > 0"),
    ("simulate", ["cluster.inter_node.bandwidth_gbps=-25"], "bandwidth_gbps=-25.0 must be > 0"),
    ("simulate", ["cluster.intra_node.efficiency=2"], "efficiency=2.0 must be from 0.01 to 1"),
    ("simulate", ["cluster.inter_node.efficiency=0"], "efficiency=0.0 must be from 0.01 to 1"),
    ("simulate", ["cluster.inter_node.latency_us=nan"], "latency_us=nan must be >= 0"),
    ("simulate", ["cluster.inter_node.latency_us=-1"], "latency_us=-1.0 must be >= 0"),
    ("simulate", ["cluster.inter_node.latency_us=1e30"], "latency_us=1e+30 must be <="),
    ("simulate", ["cluster.intra_node.peer_link_gbps=inf"], "peer_link_gbps=inf must be <="),
    ("simulate", ["cluster.intra_node.peer_link_gbps=0"], "peer_link_gbps=0.0 must be > 0"),
    ("simulate", ["cluster.intra_node.mesh_size=-1"], "mesh_size=-1 must be >= 0"),
    ("simulate", ["cluster.intra_node.cross_mesh_gbps=-1"], "cross_mesh_gbps=-1.0 must be >= 0"),
    ("simulate", ["cluster.intra_node.topology=ring"], "topology='ring' is not one of switch"),
    # Below any device a model is trained on (autotune/simulators/limits.py): a unit slip or a
    # typo.
    ("simulate", ["cluster.device.bf16_tflops=1e-9"], "bf16_tflops=1e-09 must be >= 1"),
    ("simulate", ["cluster.device.fp32_tflops=0.5"], "fp32_tflops=0.5 must be >= 1"),
    ("simulate", ["cluster.device.memory_gib=0.08"], "memory_gib=0.08 must be >= 1"),
    ("simulate", ["cluster.device.memory_gbps=8"], "memory_gbps=8.0 must be >= 10"),
    ("simulate", ["cluster.device.matmul_efficiency=0.001"], "=0.001 must be from 0.01 to 1"),
    ("simulate", ["cluster.intra_node.bandwidth_gbps=0.01"], "bandwidth_gbps=0.01 must be >="),
    ("search", ["cluster.device.bf16_tflops=1e-9"], "bf16_tflops=1e-09 must be >= 1"),
    ("benchmark", ["data=vtrain", "hardware=[nope]"], "hardware 'nope' not in the data"),
]
TRAIN = [
    ("simulate", ["train.seq_len=0"], "seq_len=0 must be > 0"),
    ("simulate", ["train.seq_len=1000000000"], "seq_len=1000000000 must be <= 100,000,000"),
    ("simulate", ["train.global_batch_size=-4"], "global_batch_size=-4 must be > 0"),
    ("simulate", ["train.global_batch_size=0"], "global_batch_size=0 must be > 0"),
    (
        "simulate",
        ["train.global_batch_size=1000000000000000000000"],
        "global_batch_size=1000000000000000000000 must be <= 100,000,000",
    ),
    ("simulate", ["train.precision=int4"], "precision='int4' is not one of bf16"),
    ("simulate", ["train.precision=fp8"], "framework 'mindspeed' has none"),
    (
        "simulate",
        ["train.precision=fp8", "cluster=a100", "train.framework=megatron_core"],
        "which has no FP8 tensor cores",
    ),
    ("simulate", ["train.optimizer=sgd"], "optimizer='sgd' is not one of adam"),
    ("simulate", ["train.framework=nope"], "unknown framework 'nope'; available: "),
    ("simulate", ["train.framework="], "unknown framework ''"),
    ("simulate", ["train.framework=../job"], "unknown framework '../job'"),
    (  # a release autotune writes no launch files for
        "simulate",
        ["framework.release=25.0.0"],
        "framework.release='25.0.0' is not a release of mindspeed that autotune writes launch "
        "files for; supported: 26.0.0, 26.1.0, master",
    ),
    (
        "search",
        ["train.framework=megatron_core", "framework.release=core_v0.12.1"],
        "supported: core_v0.17.1, core_v0.19.0, main",
    ),
    ("simulate", ["framework.release=[26.1.0]"], "framework.release"),
    ("search", ["train.seq_len=-1"], "seq_len=-1 must be > 0"),
]
LAYOUT = [
    ("simulate", ["parallel.tp=0"], "layout: tp=0 must be > 0"),
    ("simulate", ["parallel.tp=-1"], "layout: tp=-1 must be > 0"),
    ("simulate", ["parallel.tp=3"], "tp=3 does not divide num_attention_heads=32"),
    ("simulate", ["parallel.tp=2000000"], "tp=2000000 must be <= 1,048,576"),
    ("simulate", ["parallel.pp=0"], "layout: pp=0 must be > 0"),
    ("simulate", ["parallel.pp=7", "train.framework=megatron_lm"], "pp=7 does not divide"),
    ("simulate", ["parallel.cp=0"], "layout: cp=0 must be > 0"),
    ("simulate", ["parallel.ep=0"], "layout: ep=0 must be > 0"),
    ("simulate", ["parallel.ep=3"], "is invalid"),
    ("simulate", ["parallel.vpp=0"], "layout: vpp=0 must be > 0"),
    ("simulate", ["parallel.dp=0"], "layout: dp=0 must be > 0"),
    ("simulate", ["parallel.dp=3"], "is invalid"),
    ("simulate", ["parallel.micro_batch=0"], "micro_batch=0 must be > 0"),
    ("simulate", ["parallel.micro_batch=1000000000"], "micro_batch=1000000000 must be <="),
    ("simulate", ["parallel.recompute=half"], "recompute='half' is not one of none"),
    ("simulate", ["parallel.recompute_layers=0"], "recompute_layers=0 must be > 0"),
    ("simulate", ["parallel.zero_stage=5"], "zero_stage=5 is not one of 0, 1, 2, 3"),
    (
        "simulate",
        ["parallel.zero_stage=3", "parallel.distributed_optimizer=false"],
        "zero_stage=3 shards the optimizer states too",
    ),
    ("simulate", ["parallel.zero_stage=3"], "mindspeed runs ZeRO stages 0/1 only"),
    ("simulate", ["parallel.dp_replicate=0"], "dp_replicate=0 must be > 0"),
    ("simulate", ["parallel.layer_split=[]"], "has a stage with no layers"),
    ("simulate", ["parallel.pp=2", "parallel.layer_split=[32,0]"], "has a stage with no layers"),
    ("simulate", ["parallel.pp=2", "parallel.layer_split=[10,20]"], "sums to 30"),
    ("search", ["parallel.tp=3"], "no valid layout"),
    ("search", ["parallel.tp=0"], "layout: tp=0 must be > 0"),
    ("profile", ["parallel.tp=3"], "tp=3 does not divide"),
    ("profile", ["parallel.pp=0"], "layout: pp=0 must be > 0"),
]
CONSTANTS = [
    ("simulate", ["simulator.kernel_overhead_us=-1"], "kernel_overhead_us=-1 must be a finite"),
    ("simulate", ["simulator.kernel_overhead_us=nan"], "kernel_overhead_us=nan must be a finite"),
    ("simulate", ["simulator.kernel_overhead_us=abc"], "overhead_us='abc' must be a number"),
    ("simulate", ["simulator.host_op_overhead_us=inf"], "host_op_overhead_us=inf must be"),
    (
        "simulate",
        ["simulator.attention_efficiency=5"],
        "attention_efficiency=5 must be from 0.01 to 1",
    ),
    (
        "simulate",
        ["simulator.attention_efficiency=0"],
        "attention_efficiency=0 must be from 0.01 to 1",
    ),
    ("simulate", ["simulator.attention_backward_factor=0"], "attention_backward_factor=0 must"),
    ("simulate", ["simulator.reserved_memory_gib=-5"], "reserved_memory_gib=-5 must be a finite"),
    ("simulate", ["simulator.reserved_memory_gib=1e300"], "reserved_memory_gib=1e+300 must be"),
    ("simulate", ["simulator.reserved_memory_gib=1e6"], "=1000000.0 must be <= 100,000 (GiB"),
    ("simulate", ["simulator.host_op_overhead_us=1e14"], "must be <= 1e+07 (10 s for one"),
    ("simulate", ["simulator.kernels_per_layer_forward=1.5"], "must be an integer"),
    ("simulate", ["simulator.kernels_per_layer_forward=true"], "must be an integer"),
    ("simulate", ["simulator.cp_comm_overlap=maybe"], "cp_comm_overlap='maybe' must be true or"),
    ("simulate", ["simulator.unfused_attention_bytes_per_score=5"], "must be a mapping"),
    (
        "simulate",
        ["simulator.unfused_attention_bytes_per_score.saved=-1"],
        "unfused_attention_bytes_per_score.saved=-1 must be a finite",
    ),
    ("simulate", ["simulator.unfused_attention_bytes_per_score.saved=x"], "must be a number"),
    (
        "simulate",
        ["+simulator.unfused_attention_bytes_per_score.saved.extra=0"],
        "unfused_attention_bytes_per_score.saved={'extra': 0} must be a number",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "+simulator.efficiency.matmul.extra=0.5"],
        "efficiency.matmul={'extra': 0.5} must be a number",
    ),
    ("simulate", ["+simulator.kernel_overheads_us=4"], "unknown key(s) kernel_overheads_us"),
    ("simulate", ["~simulator.kernel_overhead_us"], "missing key(s) kernel_overhead_us"),
    ("simulate", ["simulator.name=nope"], "unknown simulator 'nope'"),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.schedule=zigzag"],
        "schedule='zigzag' is not one of 1f1b, gpipe",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.efficiency.attention=5"],
        "efficiency.attention=5 must be from 0.01 to 1",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.efficiency.matmul=nan"],
        "efficiency.matmul=nan must be from 0.01 to 1",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.efficiency.memory=-1"],
        "efficiency.memory=-1 must be from 0.01 to 1",
    ),
    ("simulate", ["simulator=hierarchical", "simulator.efficiency=5"], "must be a mapping"),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.efficiency.foo=1"],
        "unknown key 'simulator.efficiency.foo'; allowed there: attention, comm, matmul, memory",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.optimizer_traffic_bytes_per_param=-5"],
        "optimizer_traffic_bytes_per_param=-5 must be a finite",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.op_costs=/nonexistent/costs.csv"],
        "op cost table /nonexistent/costs.csv: no such file",
    ),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.op_costs="],
        "simulator.op_costs='' is empty; give the path of a table autotune.profile wrote",
    ),
    (
        "simulate",
        ["+simulator.unfused_attention_dropout_bytes_per_score.mask=1"],
        "has keys backward_elementwise, forward_elementwise, mask, saved; expected",
    ),
    (
        "benchmark",
        ["simulator.analytical.kernel_overhead_us=-1"],
        "kernel_overhead_us=-1 must be a finite",
    ),
    (
        "benchmark",
        ["simulator.analytical.attention_efficiency=5"],
        "attention_efficiency=5 must be from 0.01",
    ),
    (
        "benchmark",
        ["simulators=[hierarchical]", "simulator.hierarchical.efficiency.attention=5"],
        "efficiency.attention=5 must be from 0.01 to 1",
    ),
    (
        "benchmark",
        ["simulators=[hierarchical]", "simulator.hierarchical.schedule=zigzag"],
        "schedule='zigzag'",
    ),
]
SEARCH = [
    ("search", ["search.seed=-1"], "search.seed=-1 must be from 0 to 4,294,967,295"),
    ("search", ["search.seed=1099511627776"], "search.seed=1099511627776 must be from 0"),
    ("search", ["search.top_k=0"], "search.top_k=0 must be >= 1"),
    ("search", ["search.top_k=-3"], "search.top_k=-3 must be >= 1"),
    ("search", ["search.n_trials=0"], "search.n_trials=0 must be from 1 to 100,000"),
    ("search", ["search.n_trials=100000000000"], "search.n_trials=100000000000 must be from 1"),
    ("search", ["search.polish=2"], "search.polish=2.0 must be from 0 to below 1"),
    ("search", ["search.memory_margin=-0.1"], "search.memory_margin=-0.1 must be from 0 to 1"),
    ("search", ["search.memory_margin=nan"], "search.memory_margin=nan must be from 0 to 1"),
    ("search", ["search.memory_margin=5"], "search.memory_margin=5.0 must be from 0 to 1 (a"),
    ("search", ["search.polish=-0.5"], "search.polish=-0.5 must be from 0 to below 1"),
    ("search", ["search.polish=nan"], "search.polish=nan must be from 0 to below 1"),
    ("search", ["search.polish=1"], "search.polish=1.0 must be from 0 to below 1"),
    ("search", ["search.grid_budget_s=nan"], "search.grid_budget_s=nan must be a finite"),
    ("search", ["search.grid_budget_s=inf"], "search.grid_budget_s=inf must be a finite"),
    ("search", ["search.grid_budget_s=0"], "search.grid_budget_s=0.0 must be a finite"),
    ("search", ["search.max_tp=0"], "search.max_tp=0 must be from 1 to 1,048,576"),
    ("search", ["search.max_cp=-1"], "search.max_cp=-1 must be from 1"),
    ("search", ["search.max_vpp=0"], "search.max_vpp=0 must be from 1"),
    ("search", ["search.max_etp=0"], "search.max_etp=0 must be from 1"),
    ("search", ["search.max_dp_replicate=0"], "search.max_dp_replicate=0 must be from 1"),
    ("search", ["search.zero_stages=[4]"], "search.zero_stages: 4 is not a ZeRO stage"),
    ("search", ["search.zero_stages=[3,3]"], "search.zero_stages=[3,3] names 3 more than once"),
    ("search", ["search.micro_batch=[0]"], "search.micro_batch=0 must be from 1"),
    ("search", ["search.micro_batch=[]"], "search.micro_batch=[] is empty"),
    ("search", ["search.recompute=[bogus]"], "search.recompute: 'bogus' is not one of none"),
    ("search", ["search.recompute=[]"], "search.recompute=[] is empty"),
    ("search", ["search.distributed_optimizer=[]"], "search.distributed_optimizer=[] is empty"),
    ("search", ["search.micro_batch=[1,1]"], "search.micro_batch=[1,1] names 1 more than once"),
    ("search", ["search.recompute=[full,full]"], "names full more than once"),
    ("search", ["search.distributed_optimizer=[true,true]"], "names true more than once"),
    ("search", ["search.rerank_top=0"], "search.rerank_top=0 must be >= 1"),
    ("search", ["search.rerank_top=-1"], "search.rerank_top=-1 must be >= 1"),
    ("search", ["search.workers=0"], "search.workers=0 must be >= 1"),
    # calibrate.*, read by the search's probe loop, the benchmark's protocols and calibrate
    ("search", ["calibrate.stop_gain=nan"], "calibrate.stop_gain=nan must be from 0 to below 1"),
    ("search", ["calibrate.stop_probability=0"], "stop_probability=0.0 must be above 0 and"),
    ("search", ["calibrate.time_noise=inf"], "calibrate.time_noise=inf must be a finite number"),
    ("search", ["calibrate.prior.host_overhead=inf"], "prior.host_overhead=inf must be a finite"),
    ("search", ["calibrate.seed=-1"], "calibrate.seed=-1 must be from 0 to 4,294,967,295"),
    ("search", ["calibrate.interval=1"], "calibrate.interval=1.0 must be above 0 and below 1"),
    ("benchmark", ["calibrate.relinearize=1000000000000"], "must be from 0 to 100 (0: an exact"),
    ("benchmark", ["calibrate.bootstrap_samples=1000000000000"], "must be from 0 to 1,000,000"),
    ("benchmark", ["calibrate.max_evaluations=0"], "max_evaluations=0 must be from 1 to 100,000"),
    (
        "calibrate",
        [f"data={DATA}", "name=x", "calibrate.bootstrap_samples=1000000000000"],
        "calibrate.bootstrap_samples=1000000000000 must be from 0 to 1,000,000",
    ),
    (
        "calibrate",
        [f"data={DATA}", "name=x", "calibrate.prior.matmul_efficiency=-1"],
        "calibrate.prior.matmul_efficiency=-1.0 must be a finite number > 0 (a prior width)",
    ),
    ("search", ["search.sampler=cmaes"], "available: auto, grid, screen, tpe, gp, random, nsga2"),
    ("search", ["search.sampler="], "unknown sampler ''"),
    ("search", ["search.rerank=nope"], "unknown search.rerank simulator 'nope'"),
    ("search", ["output=xml"], "unknown output 'xml'; allowed: table, json"),
    ("simulate", ["output=yaml"], "unknown output 'yaml'"),
    ("simulate", ["search.seed=-1"], "search.seed=-1 must be from 0"),
]
TRACKING = [
    ("search", ["search.storage=notaurl"], "search.storage='notaurl' is not a storage URL"),
    ("search", ["search.storage="], "search.storage='' is not a storage URL"),
    ("search", ["search.storage=journal:/tmp"], "'journal:/tmp' is a folder; give a file path"),
    ("search", ["search.storage=sqlite:////proc/nope/x.db"], "/proc takes no new file"),
    ("search", ["tracking.uri=notauri"], "tracking.uri='notauri' is not usable"),
    ("search", ["tracking.uri=file:"], "MLflow 3.13+ refuses a plain file store"),
    ("search", ["tracking.uri="], "tracking.uri='' is empty"),
    ("search", ["tracking.uri=sqlite:////proc/nope/m.db"], "/proc takes no new file"),
    ("search", ["tracking.uri=sqlite:////tmp"], "'sqlite:////tmp' is a folder; give a file"),
    ("benchmark", ["tracking.uri=notauri"], "tracking.uri='notauri' is not usable"),
    # A database server is asked once before any work (MLflow would retry for minutes after
    # it, then lose the record); its password is never shown.
    (
        "search",
        ["tracking.uri=postgresql://me:secret@127.0.0.1:1/x"],
        "tracking.uri='postgresql://me:***@127.0.0.1:1/x': cannot connect to the database (",
    ),
    ("search", ["tracking.uri=postgresql+nodriver://h/x"], "needs a database driver"),
    ("benchmark", ["tracking.uri=postgresql://me@127.0.0.1:1/x"], "cannot connect to the data"),
    (
        "search",
        ["search.storage=postgresql://me:secret@127.0.0.1:1/x"],
        "search.storage='postgresql://me:***@127.0.0.1:1/x': cannot connect to the database (",
    ),
]
BENCHMARK = [
    ("benchmark", ["top_k=0"], "top_k=0 must be >= 1"),
    ("benchmark", ["top_k=-2"], "top_k=-2 must be >= 1"),
    ("benchmark", ["bootstrap_samples=0"], "bootstrap_samples=0 must be from 1 to 1,000,000"),
    ("benchmark", ["bootstrap_samples=-1"], "bootstrap_samples=-1 must be from 1"),
    ("benchmark", ["bootstrap_samples=1000000000"], "bootstrap_samples=1000000000 must be"),
    ("benchmark", ["oom_penalty_regret=nan"], "oom_penalty_regret=nan must be from 0 to 1"),
    ("benchmark", ["oom_penalty_regret=inf"], "oom_penalty_regret=inf must be from 0 to 1"),
    ("benchmark", ["oom_penalty_regret=-1"], "oom_penalty_regret=-1.0 must be from 0 to 1"),
    ("benchmark", ["oom_penalty_regret=2"], "oom_penalty_regret=2.0 must be from 0 to 1"),
    ("benchmark", ["seed=-1"], "seed=-1 must be from 0 to 4,294,967,295"),
    ("benchmark", ["memory_margin=-1"], "memory_margin=-1.0 must be from 0 to 1 (a fraction"),
    ("benchmark", ["memory_margin=inf"], "memory_margin=inf must be from 0 to 1"),
    ("benchmark", ["seed=1099511627776"], "seed=1099511627776 must be from 0"),
    ("benchmark", ["heuristic.state_memory_fraction=2"], "state_memory_fraction=2.0 must be in"),
    ("benchmark", ["heuristic.state_memory_fraction=0"], "state_memory_fraction=0.0 must be in"),
    ("benchmark", ["heuristic.state_memory_fraction=nan"], "state_memory_fraction=nan must"),
    ("benchmark", ["data="], "data='' is empty"),
    ("benchmark", ["data=nope"], "unknown data 'nope'; expected public"),
    ("benchmark", ["data=/nonexistent.csv"], "/nonexistent.csv: no such file"),
    ("benchmark", ["simulators=[nope]"], "unknown simulator 'nope'; available: analytical"),
    ("benchmark", ["simulators=5"], "unknown simulator '5'"),
    ("benchmark", ["baselines=[nope]"], "unknown baseline(s) nope; allowed: random, heuristic"),
    ("benchmark", [f"data={DATA}", "source=[nope]"], "source 'nope' not in the data"),
    ("benchmark", [f"data={DATA}", "hardware=[h100]"], "hardware 'h100' not in the data"),
    ("benchmark", ["output=xml"], "unknown output 'xml'"),
    # A name twice would score every row twice.
    ("benchmark", ["simulators=[analytical,analytical]"], "names analytical more than once"),
    ("benchmark", ["simulators=[]", "baselines=[]"], "simulators=[] and baselines=[]: nothing"),
    (
        "simulate",
        ["hydra.searchpath=[file:///nonexistent/conf]"],
        "hydra.searchpath: file:///nonexistent/conf is not a folder; give folders that hold",
    ),
    ("search", ["hydra.searchpath=[pkg://nopkg.conf]"], "pkg://nopkg.conf names no installed"),
    ("benchmark", ["baselines=[random,heuristic,random]"], "names random more than once"),
    ("benchmark", ["protocols=[zero_shot,zero_shot]"], "names zero_shot more than once"),
    ("benchmark", ["probes=[1,2,1]"], "probes=[1,2,1] names 1 more than once"),
    ("benchmark", ["hardware=[a100,a100]"], "hardware=[a100,a100] names a100 more than once"),
    # A filter that keeps nothing, and a list where a name goes: said before the data loads.
    ("benchmark", ["hardware=[]"], "hardware=[] is empty; give at least one, or leave hardware"),
    ("benchmark", ["source=[]"], "source=[] is empty; give at least one, or leave source unset"),
    ("benchmark", ["protocols=[]"], "protocols=[] is empty"),
    ("benchmark", ["protocols=[nope]"], "unknown protocol(s) nope; allowed: zero_shot"),
    ("benchmark", ["protocols=[probe]", "probes=[]"], "probes=[]: give at least one K, each"),
    ("benchmark", ["probes=[0]"], "probes=[0]: give at least one K, each from 1 to 1,000"),
    ("benchmark", ["probes=[1,1000000000000000000000]"], "each from 1 to 1,000 (layouts"),
    ("search", ["probes=-1"], "probes=-1 must be from 0 to 1,000 layouts to measure (0: none)"),
    ("search", ["probes=1000000000000000000000"], "must be from 0 to 1,000 layouts to measure"),
    ("benchmark", ["simulators=[[analytical]]"], "simulators: ['analytical'] is not a name"),
    ("benchmark", ["source=[{a:1}]"], "source: {'a': 1} is not a name; give NAME or [NAME,...]"),
    ("benchmark", ["baselines=[random,null]"], "baselines: None is not a name"),
    ("calibrate", [f"data={DATA}", "name=x", "rows.source=[]"], "rows.source=[] is empty"),
    ("calibrate", [f"data={DATA}"], "name= is required and has no default: give it"),
    ("calibrate", [f"data={DATA}", "name=x", "rows.hardware=[[a100]]"], "is not a name"),
    ("calibrate", [f"data={DATA}", "name=x", "rows.exclude_model=[{a:1}]"], "is not a name"),
]
PROFILE = [
    ("profile", ["repeats=0"], "repeats=0 must be from 1 to 1,000"),
    ("profile", ["repeats=-1"], "repeats=-1 must be from 1 to 1,000"),
    ("profile", ["repeats=1000000"], "repeats=1000000 must be from 1 to 1,000"),
    ("profile", ["limit=0"], "limit=0 must be >= 1"),
    ("profile", ["limit=-5"], "limit=-5 must be >= 1"),
    ("profile", ["output=xml"], "unknown output 'xml'"),
    ("profile", ["device=tpu"], "device='tpu' is not one of auto, cpu, cuda, npu"),
    ("profile", ["cluster.num_nodes=0"], "num_nodes=0 must be > 0"),
    ("profile", ["train.precision=int4"], "precision='int4'"),
]
NOT_A_NAME = "is not a name: use 1 to 64 letters, digits, '.', '_' or '-', starting with a"
NAMES = [
    ("simulate", ["model.name="], f"model.name='' {NOT_A_NAME}"),
    (
        "simulate",
        ['model.name="x\ntouch owned #"'],
        f"model.name='x\\ntouch owned #' {NOT_A_NAME}",
    ),
    ("simulate", ["model.name='a b'"], f"model.name='a b' {NOT_A_NAME}"),
    ("simulate", ["model.name=-rf"], f"model.name='-rf' {NOT_A_NAME}"),
    ("simulate", ["model.name=" + "a" * 65], NOT_A_NAME),
    ("search", ["model.name='$(touch owned)'"], f"model.name='$(touch owned)' {NOT_A_NAME}"),
    ("simulate", ["cluster.name="], f"cluster.name='' {NOT_A_NAME}"),
    ("simulate", ['cluster.name="c\rimport os"'], f"cluster.name='c\\rimport os' {NOT_A_NAME}"),
    ("simulate", ["cluster.name='a;b'"], f"cluster.name='a;b' {NOT_A_NAME}"),
    ("simulate", ['cluster.fitted_on=[""]'], f"cluster.fitted_on='' {NOT_A_NAME}"),
    ("simulate", ["cluster.fitted_on=[a/b]"], f"cluster.fitted_on='a/b' {NOT_A_NAME}"),
    ("simulate", ["cluster.device.name="], "cluster.device.name='' is not a device name"),
    ("simulate", ["cluster.device.name='`id`'"], "cluster.device.name='`id`' is not a device"),
    ("search", ["search.study_name="], f"search.study_name='' {NOT_A_NAME}"),
    ("search", ["search.study_name=../x"], f"search.study_name='../x' {NOT_A_NAME}"),
    ("search", ["tracking.experiment="], f"tracking.experiment='' {NOT_A_NAME}"),
    ("benchmark", ["tracking.experiment='a\"b'"], f"tracking.experiment='a\"b' {NOT_A_NAME}"),
    ("search", ["calibration=bad\\name"], f"calibration='bad\\\\name' {NOT_A_NAME}"),
    ("simulate", ["calibration=../model/llama2_7b"], "calibration='../model/llama2_7b': no such"),
    ("simulate", ["calibration=nope"], "unknown calibration 'nope'; available: "),
    ("benchmark", ["calibration=/nonexistent.yaml"], "calibration='/nonexistent.yaml': no such"),
    (
        "calibrate",
        [f"data={DATA}", "name=../model/llama2_7b"],
        f"name='../model/llama2_7b' {NOT_A_NAME}",
    ),
    ("calibrate", [f"data={DATA}", "name=/abs/x"], f"name='/abs/x' {NOT_A_NAME}"),
    ("calibrate", [f"data={DATA}", "name=''"], f"name='' {NOT_A_NAME}"),
    ("calibrate", [f"data={DATA}", "name=a/b/c"], f"name='a/b/c' {NOT_A_NAME}"),
    ("calibrate", [f"data={DATA}", "name=.."], f"name='..' {NOT_A_NAME}"),
    ("calibrate", [f"data={DATA}", "name=x.yaml"], "name='x.yaml' ends in .yaml, so calibration"),
    ("calibrate", [f"data={DATA}", "name=x", "calibration=../x"], "calibration='../x': no such"),
]
PATHS = [
    ("profile", ["out=/proc/nope/ops.csv"], "out='/proc/nope/ops.csv' cannot be written"),
    ("profile", ["out=/tmp"], "out='/tmp' is a folder; give a file path"),
    ("profile", ["out="], "out='' is empty; give a file path"),
    ("profile", ["out=/etc/passwd/ops.csv"], "/etc/passwd is a file, not a folder"),
    ("simulate", ["trace=/proc/nope/t.json"], "trace='/proc/nope/t.json' cannot be written"),
    ("simulate", ["trace=/tmp"], "trace='/tmp' is a folder; give a file path"),
    ("simulate", ["trace="], "trace='' is empty"),
    ("simulate", ["trace=t.json"], "trace= needs a simulator with an event timeline"),
    ("search", ["trace=/proc/nope/t.json"], "cannot be written"),
    ("benchmark", ["report_dir=/proc/nope"], "report_dir='/proc/nope' cannot be written"),
    ("benchmark", ["report_dir=/etc/passwd"], "report_dir='/etc/passwd' is a file"),
    ("benchmark", ["report_dir=/etc/passwd/x"], "/etc/passwd is a file, not a folder"),
    ("benchmark", ["report_dir="], "report_dir='' is empty; give a folder path"),
    ("benchmark", ["report_dir=/dev/null"], "report_dir='/dev/null' is a device; give a folder"),
    ("profile", ["out=/dev/full"], "out='/dev/full' is a device; give a file path"),
    ("simulate", ["trace=/dev/null"], "trace='/dev/null' is a device; give a file path"),
    ("search", ["probes=1", "probes_out=/dev/full"], "probes_out='/dev/full' is a device"),
    ("search", ["probes=1", "probes_out=/proc/p.csv"], "/proc takes no new file"),
    ("search", ["probes=1", "probes_out=/tmp"], "probes_out='/tmp' is a folder"),
    ("search", ["launch_dir=/dev/null"], "launch_dir='/dev/null' is a device; give a folder"),
    ("search", ["launch_dir="], "launch_dir='' is empty; give a folder path"),
    ("search", ["launch_dir=/etc/passwd"], "launch_dir='/etc/passwd' is a file; give a folder"),
    ("search", ["search.storage=sqlite:////dev/full"], "'sqlite:////dev/full' is a device"),
    ("search", [f"search.storage=journal:{DATA}"], "runs.csv is not an Optuna journal file"),
    ("search", ["tracking.uri=sqlite:////dev/null"], "'sqlite:////dev/null' is a device"),
    ("search", ["measured=/nonexistent.csv"], "/nonexistent.csv: no such file"),
    ("search", ["measured=/dev/zero"], "/dev/zero: a device; give a .csv or .parquet file"),
    (
        "calibrate",
        ["data=korthikanti", "name=x", "rows.exclude_model=[GPT-3 (h=1),b]"],
        "Unknown function 'GPT-3'; quote a value that holds spaces, commas, parentheses",
    ),
    (
        "calibrate",
        ["data=korthikanti", "name=x", "rows.exclude_model=[a (h=6, L=4),b c (h=1)]"],
        "no viable alternative at input '[a (h=6, L=4),b c ('; quote a value that holds",
    ),
    ("simulate", ["calibration=/dev/zero"], "calibration='/dev/zero': a device; give a calibrat"),
    (
        "simulate",
        ["simulator=hierarchical", "simulator.op_costs=/dev/zero"],
        "op cost table /dev/zero: a device; give the CSV table autotune.profile wrote",
    ),
    (
        "simulate",
        ["simulator.op_costs=ops.csv"],  # the hierarchical simulator's key, not the analytical's
        "unknown key 'simulator.op_costs'; allowed there: allocator_fragmentation, ",
    ),
    ("search", ["measured="], "measured='' is empty; give the filled-in probes CSV, or leave"),
    (
        "calibrate",
        ["data=", "name=x"],
        "data='' is empty; give public, a shipped source or a file",
    ),
]
GROUPS = [HYDRA, FLAGS, MODEL, CLUSTER, TRAIN, LAYOUT, CONSTANTS, SEARCH, TRACKING, BENCHMARK]
GROUPS += [PROFILE, NAMES, PATHS]
CASES = [case for group in GROUPS for case in group]


def _id(case: tuple[str, list[str], str]) -> str:
    return f"{case[0]}:{' '.join(case[1])}"


def _params() -> list[Any]:
    """Every case, ``slow`` past the first of its group for its command (400 take minutes)."""
    params, seen = [], set()
    for number, group in enumerate(GROUPS):
        for case in group:
            marks = [pytest.mark.slow] if (number, case[0]) in seen else []
            seen.add((number, case[0]))
            params.append(pytest.param(*case, marks=marks, id=_id(case)))
    return params


def test_the_cases_are_many_and_distinct() -> None:
    assert len({_id(case) for case in CASES}) == len(CASES) >= 150
    assert {command for command, *_ in CASES} == set(MAINS)


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("data") / "runs.csv", {}, {"tp": 4, "dp": 2})


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def run_main(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Run:
    """Run a command's ``main`` from an empty folder; (status, stdout, stderr)."""
    monkeypatch.delenv("AUTOTUNE_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)

    def run(command: str, *args: str) -> tuple[int, str, str]:
        main = importlib.import_module(MAINS[command]).main
        try:
            status = main(list(args))
        except SystemExit as exc:  # pragma: no cover - a failure is reported below
            status = exc.code
        out, err = capsys.readouterr()
        return status, out, err

    return run


def _arguments(command: str, args: list[str], data: Path, folder: Path) -> list[str]:
    given = [a.replace(DATA, str(data)) for a in args]
    base: list[str] = [] if command in ("benchmark", "calibrate") else list(SMALL)
    if command in ("search", "benchmark") and not any(a.startswith("tracking.") for a in args):
        base.append(f"tracking.uri=sqlite:///{folder / 'mlruns' / 'mlflow.db'}")
    return base + given


def assert_one_clean_error(status: int, stderr: str, words: str) -> None:
    assert status == 2, stderr
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    # Only the error line, or the broken rules of a layout listed below it.
    assert all(line.startswith(("error: ", "  - ")) for line in lines), stderr
    assert words in stderr, stderr


@pytest.mark.parametrize(("command", "args", "words"), _params())
def test_bad_input_is_one_error_line_and_nothing_written(
    run_main: Run, tmp_path: Path, data_file: Path, command: str, args: list[str], words: str
) -> None:
    status, out, err = run_main(command, *_arguments(command, args, data_file, tmp_path))
    assert_one_clean_error(status, err, words)
    assert out == ""
    written = list(tmp_path.rglob("*"))
    assert written == []  # no report, table, trace, study, MLflow database, nor their folders


def _files(folder: Path) -> list[Path]:
    """The files written under ``folder`` (a report, a table, a study, an MLflow database)."""
    return [p for p in folder.rglob("*") if p.is_file()]


# Files a command reads that hold a value no run has: (command, file, its content, the words).
# A measurement file: the cells a row changes of a valid one (tests/dataset_tests/_tables.py).
IMPLAUSIBLE_ROWS: list[tuple[str, list[dict[str, object]], str]] = [
    ("tiny", [{"step_time_s": 1e-300}], "line 2, column step_time_s: expected a number from"),
    ("split", [{"tp": 4, "pp": 2, "layer_split": "7/7"}], "layer_split [7, 7] sums to 14"),
    (
        "conflict",
        [{"step_time_s": 1.0}, {"step_time_s": 3.0}],
        "lines 2 and 3: the same job and layout measured 1 s and 3 s per step",
    ),
    (
        "throughput",
        [{"tokens_per_s_per_device": 131072.0}],
        "line 2, column tokens_per_s_per_device: 131072, but global_batch_size x seq_len",
    ),
    ("peak", [{"peak_memory_gib": 200.0}], "200 GiB is more than the device's 80 GiB"),
]
# A calibration file (YAML), applied by calibration=PATH.
IMPLAUSIBLE_CALIBRATIONS = [
    ("inf_margin", "memory_margin: .inf", "memory_margin=inf out of range"),
    ("big_margin", "memory_margin: 3", "memory_margin=3 out of range"),
    ("huge_factor", "factors: {host_overhead: 1.0e+308}", "host_overhead=1e+308 out of range"),
    ("tiny_factor", "factors: {matmul_efficiency: 0.001}", "matmul_efficiency=0.001 out of"),
    ("bool_factor", "factors: {memory_factor: true}", "memory_factor=True out of range"),
    ("nan_constant", "factors: {memory_constant_gib: .nan}", "memory_constant_gib=nan out of"),
]


@pytest.mark.parametrize(
    ("name", "rows", "words"), IMPLAUSIBLE_ROWS, ids=[r[0] for r in IMPLAUSIBLE_ROWS]
)
def test_an_implausible_measurement_is_one_error_line_naming_the_row(
    run_main: Run,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    rows: list[dict[str, object]],
    words: str,
) -> None:
    data = write(tmp_path_factory.mktemp("rows") / f"{name}.csv", *rows)
    args = _arguments("benchmark", [f"data={data}"], data, tmp_path)
    status, out, err = run_main("benchmark", *args)
    assert_one_clean_error(status, err, words)
    assert f"{name}.csv" in err and out == "" and not _files(tmp_path)


@pytest.mark.parametrize(
    ("name", "content", "words"),
    IMPLAUSIBLE_CALIBRATIONS,
    ids=[c[0] for c in IMPLAUSIBLE_CALIBRATIONS],
)
@pytest.mark.parametrize("command", ["simulate", "search"])
def test_an_implausible_calibration_is_one_error_line_even_with_json_output(
    run_main: Run,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    command: str,
    name: str,
    content: str,
    words: str,
) -> None:
    path = tmp_path_factory.mktemp("calibrations") / f"{name}.yaml"
    path.write_text(f"simulator: analytical\n{content}\n", encoding="utf-8")
    args = _arguments(command, [f"calibration={path}", "output=json"], path, tmp_path)
    status, out, err = run_main(command, *args)
    assert_one_clean_error(status, err, f"calibration file {path}: calibration '{name}': ")
    assert words in err and out == "" and not _files(tmp_path)


# A cost table (simulator.op_costs=PATH): its bytes, and the words of the error.
BAD_COST_TABLES = [
    ("utf16", "op,shapes,dtype,device,time_us\n".encode("utf-16"), "not a UTF-8 CSV table"),
    ("inf", b"op,shapes,dtype,device,time_us\nmm,1x2,bf16,cpu,inf\n", "a day), got 'inf'"),
    ("short", b"op,shapes,dtype,device,time_us\nmm,1x2\n", "line 2: more or fewer cells"),
    ("long", b"op,shapes,dtype,device,time_us\nmm,1x2,bf16,cpu,3,4\n", "line 2: more or fewer"),
    ("huge", b"op,shapes,dtype,device,time_us\na.mm.default,1x2,,cpu,1e300\n", "got '1e300'"),
    ("header", b"op,shapes,dtype,device,time_us\n", "no rows, only the header"),
    ("twice", b"op,shapes,dtype,device,time_us\na.b.c,,,cpu,1\na.b.c,,,cpu,2\n", "lines 2 and 3"),
]


@pytest.mark.parametrize(
    ("name", "content", "words"), BAD_COST_TABLES, ids=[c[0] for c in BAD_COST_TABLES]
)
def test_a_malformed_cost_table_is_one_error_naming_the_file(
    run_main: Run,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    content: bytes,
    words: str,
) -> None:
    path = tmp_path_factory.mktemp("costs") / f"{name}.csv"
    path.write_bytes(content)
    args = [*SMALL, "simulator=hierarchical", f"simulator.op_costs={path}"]
    status, out, err = run_main("simulate", *args)
    assert_one_clean_error(status, err, f"op cost table {path}")
    assert words in err and out == "" and not _files(tmp_path)


# python -m autotune.dataset.build (argparse): (arguments, words); {raw} is a copy of the raw
# files with one of them not UTF-8, {part} a folder with only one of them.
BUILD = [
    ([], "error: the following arguments are required: --out (usage: python -m autotune."),
    (["--out", "t", "--bogus"], "error: unrecognized arguments: --bogus (usage: "),
    (["--out"], "error: argument --out: expected one argument"),
    (["--out", ""], "error: --out='' is empty; give a folder path"),
    (["--out", "t", "--raw", "{part}"], "raw file(s) simumax_b200.csv, korthikanti_recompute"),
    (["--out", "t", "--raw", "{raw}"], "bloom_tr11_prequel_a100.csv: cannot be converted ("),
]


@pytest.mark.parametrize(("args", "words"), BUILD, ids=[" ".join(a) for a, _ in BUILD])
def test_a_bad_build_is_one_error_line_and_writes_no_table(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    words: str,
) -> None:
    """Every table converts before any is written: a bad raw file leaves no half-built set."""
    from autotune.dataset import build

    raw = tmp_path_factory.mktemp("raw")
    shutil.copytree(build.RAW_DIR, raw, dirs_exist_ok=True)
    (raw / "bloom_tr11_prequel_a100.csv").write_bytes(b"garbage\xff\n")
    part = tmp_path_factory.mktemp("part")
    shutil.copy(build.RAW_DIR / "vtrain_a100.csv", part)
    monkeypatch.chdir(tmp_path)
    given = [a.replace("{raw}", str(raw)).replace("{part}", str(part)) for a in args]
    try:
        status = build.main(given)
    except SystemExit as exc:  # argparse's refusals
        status = exc.code
    out, err = capsys.readouterr()
    assert_one_clean_error(status, err, words)
    assert out == "" and not any(tmp_path.iterdir())


def _process(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DEBUG"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "args", "words"),
    [
        ("autotune", ["search.seed=-1"], "search.seed=-1 must be from 0"),
        ("autotune.simulate", ["cluster.device.memory_gib=inf"], "memory_gib=inf must be <="),
        ("autotune.simulate", ["model.layerz=3"], "unknown key 'model.layerz'"),
        ("autotune.simulate", ["parallel.tp=["], "cannot parse the override"),
        ("autotune.benchmark", ["oom_penalty_regret=nan"], "oom_penalty_regret=nan must be"),
        ("autotune.profile", ["repeats=0"], "repeats=0 must be from 1"),
    ],
)
def test_a_real_process_prints_one_line_and_exits_2(
    tmp_path: Path, module: str, args: list[str], words: str
) -> None:
    base = [] if module == "autotune.benchmark" else list(SMALL)
    proc = _process(module, *base, *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith("error: ") and words in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not any(tmp_path.iterdir())  # nothing written, not even a folder
