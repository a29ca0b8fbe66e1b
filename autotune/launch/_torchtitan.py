"""torchtitan: the TOML job config of the pick and the ``torchrun`` script that starts it.

Written for torchtitan's TOML release (``framework.release``, v0.2.2; docs/torchtitan.md 7):
every key is one of that release's ``config/job_config.py``
(:mod:`autotune.launch._torchtitan_keys`).
The layout maps onto ``ParallelDims`` (docs/torchtitan.md 1): ZeRO-3 is FSDP2 over
``dp_shard = dp / dp_replicate`` (and CP), ZeRO-0 is DDP (``dp_replicate = dp``); the layers
of each (virtual) stage are named in ``module_fqns_per_model_part``. torchtitan builds the
model from its own registry (``model.name``, ``model.flavor``), so only models one of its
flavors matches are launched (:func:`refusals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.launch._script import ArgGroup
from autotune.launch._script import BashScript
from autotune.launch._script import Flag
from autotune.launch._script import Launch
from autotune.launch._script import LaunchFile
from autotune.launch._script import Ref
from autotune.launch._script import Variable
from autotune.launch._script import comment
from autotune.launch._script import flag
from autotune.launch._script import require

__all__ = ["CONFIG_NAME", "SCRIPT_NAME", "job_config", "launch_files", "layout_flags", "refusals"]

SCRIPT_NAME = "launch_torchtitan.sh"
CONFIG_NAME = "torchtitan_job.toml"

# torchtitan v0.2.2's llama3 flavors (models/llama3/__init__.py at 73a0e6979dd1): hidden, layers,
# heads, KV heads, FFN width (dim, n_layers, n_heads, n_kv_heads and the SwiGLU width that
# ffn_dim_multiplier and multiple_of give), vocabulary of the Llama 3 tokenizer.
_FLAVORS: Mapping[tuple[int, ...], tuple[str, str]] = {
    (4096, 32, 32, 8, 14336, 128256): ("llama3", "8B"),
    (8192, 80, 64, 8, 28672, 128256): ("llama3", "70B"),
    (16384, 126, 128, 8, 53248, 128256): ("llama3", "405B"),
}


def _flavor(launch: Launch) -> tuple[str, str] | None:
    m = launch.job.model
    shape = (m.hidden_size, m.num_layers, m.num_attention_heads, m.num_kv_heads)
    return _FLAVORS.get((*shape, m.ffn_hidden_size, m.vocab_size))


def _stage_layers_every(launch: Launch) -> int | None:
    """torchtitan's ``selective_ac_option`` N for ``recompute_layers`` k: every N-th block of
    a rank is checkpointed whole (a counter over its blocks), so k = S / N with S the layers
    of every stage; None when the stages differ or N is not whole."""
    k = launch.layout.recompute_layers
    stages = set(launch.layout.stage_layers(launch.job.model, launch.job.train))
    if k is None or len(stages) != 1:
        return None
    (layers,) = stages
    return layers // k if layers % k == 0 else None


def refusals(launch: Launch) -> list[str]:
    """What v0.2.2 cannot be told of this job, one sentence each."""
    found = []
    if _flavor(launch) is None:
        known = ", ".join(f"{name} {flavor}" for name, flavor in _FLAVORS.values())
        found.append(
            f"torchtitan builds models from its registry; no flavor it has matches "
            f"{launch.job.model.name} (launched: {known})"
        )
    every = launch.layout.recompute_layers
    if every is not None and _stage_layers_every(launch) is None:
        found.append(
            f"recompute_layers={every}: torchtitan checkpoints every N-th "
            "block of a rank, which needs equal stages of a multiple of it"
        )
    return found


def _degrees(launch: Launch) -> dict[str, Any]:
    lay = launch.layout
    replicate = lay.dp if lay.sharding == 0 else lay.dp_replicate
    return {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": lay.dp // replicate,
        "fsdp_reshard_after_forward": "default",
        "tensor_parallel_degree": lay.tp,
        "enable_async_tensor_parallel": lay.hides_tp_comm(launch.job.train),
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
        "expert_parallel_degree": lay.ep,
        "expert_tensor_parallel_degree": lay.tp if lay.ep > 1 else 1,
    }


def _pipeline(launch: Launch) -> dict[str, Any]:
    """The schedule and each (virtual) stage's modules, in model order (torchtitan's loop)."""
    lay = launch.layout
    if lay.pp == 1:
        return {}
    parts, first = [], 0
    for count in launch.chunk_layers:
        parts.append([f"layers.{i}" for i in range(first, first + count)])
        first += count
    parts[0].insert(0, "tok_embeddings")
    parts[-1] += ["norm", "output"]
    return {
        "pipeline_parallel_schedule": "Interleaved1F1B" if lay.vpp > 1 else "1F1B",
        "pipeline_parallel_microbatch_size": lay.micro_batch,
        "module_fqns_per_model_part": parts,
    }


def job_config(launch: Launch) -> dict[str, dict[str, Any]]:
    """The TOML's tables: dotted table name -> key -> value (keys of the release only)."""
    lay, train = launch.layout, launch.job.train
    name, flavor = _flavor(launch) or ("llama3", "")
    per_rank = train.global_batch_size // lay.dp
    config: dict[str, dict[str, Any]] = {
        "job": {"description": launch.describe()},
        "model": {"name": name, "flavor": flavor},
        "training": {
            # PP: one step runs every micro-batch of the rank; else accumulate micro-batches
            "local_batch_size": per_rank if lay.pp > 1 else lay.micro_batch,
            "global_batch_size": train.global_batch_size,
            "seq_len": train.seq_len,
            "dtype": "float32",
            "mixed_precision_param": "float32" if launch.job.dtype == "fp32" else "bfloat16",
            "mixed_precision_reduce": "float32",
        },
        "parallelism": {**_degrees(launch), **_pipeline(launch)},
        "activation_checkpoint": _recompute(launch),
        "compile": {"enable": lay.hides_tp_comm(train), "components": ["model", "loss"]},
    }
    if lay.cp > 1:  # the ring the simulators price (cp_comm_types p2p)
        config["parallelism"]["context_parallel_rotate_method"] = "alltoall"
    if train.fp8:
        config["model"]["converters"] = ["quantize.linear.float8"]
        config["quantize.linear.float8"] = {"recipe_name": "rowwise", "filter_fqns": ["output"]}
    return config


def _recompute(launch: Launch) -> dict[str, Any]:
    lay = launch.layout
    if lay.recompute == "full" and lay.recompute_layers is not None:
        return {"mode": "selective", "selective_ac_option": str(_stage_layers_every(launch))}
    return {"mode": "full" if lay.recompute == "full" else "none"}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return "[" + ", ".join(_toml_value(item) for item in value) + "]"


def render_toml(launch: Launch) -> str:
    """The job config as TOML text, headed by comments naming the release and the job."""
    lines = [comment(launch.written_for("torchtitan job config")), comment(launch.describe())]
    for table, values in job_config(launch).items():
        lines += ["", f"[{table}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def layout_flags(launch: Launch) -> tuple[Flag, ...]:
    """The layout's keys as ``--section.key value`` (torchtitan's command-line spelling)."""
    found = []
    for table in ("parallelism", "activation_checkpoint"):
        for key, value in job_config(launch)[table].items():
            if not isinstance(value, list):
                found.append(flag(f"--{table}.{key}", _toml_value(value).strip('"')))
    return tuple(found)


# The run's choices, given on the command line over the TOML (keys of the release).
RUN_FLAGS = (
    flag("--job.config_file", Ref("CONFIG_FILE")),
    flag("--job.dump_folder", Ref("DUMP_FOLDER")),
    flag("--model.hf_assets_path", Ref("HF_ASSETS")),
    flag("--training.dataset", Ref("DATASET")),
    flag("--training.steps", Ref("TRAIN_ITERS")),
    flag("--optimizer.lr", Ref("LR")),
    flag("--metrics.log_freq", Ref("LOG_INTERVAL")),
)


def script(launch: Launch, title: str) -> BashScript:
    """``run_train.sh``'s torchrun line, multi-node through a c10d rendezvous."""
    cluster = launch.job.cluster
    return BashScript(
        header=(
            launch.written_for(f"{title} launch"),
            launch.describe(),
            *launch.precision_notes(),
            f"The layout is in {CONFIG_NAME}; torch.compile is off unless async TP needs it.",
            "Run it on every node with the same MASTER_ADDR: MASTER_ADDR=<node 0> bash <this>.",
        ),
        variables=(
            Variable("TORCHTITAN_DIR", ".", "the torchtitan v0.2.2 checkout"),
            Variable("CONFIG_FILE", f"${{SCRIPT_DIR}}/{CONFIG_NAME}", "the job config, beside"),
            Variable("HF_ASSETS", "./assets/hf/Llama-3.1-8B", "tokenizer (download_hf_assets.py)"),
            Variable("DATASET", "c4", "a dataset torchtitan registers"),
            Variable("DUMP_FOLDER", "${SCRIPT_DIR}/outputs", "logs and checkpoints"),
            Variable("TRAIN_ITERS", "100", "optimizer steps to run"),
            Variable("LR", "8e-4", "peak learning rate"),
            Variable("LOG_INTERVAL", "10", "steps between log lines"),
            Variable("MASTER_ADDR", "localhost", "address of the rendezvous node"),
            Variable("MASTER_PORT", "29500", "a free TCP port on that node"),
            Variable("RDZV_ENDPOINT", "${MASTER_ADDR}:${MASTER_PORT}", "c10d rendezvous"),
        ),
        setup=(
            require('! -f "${CONFIG_FILE}"', "CONFIG_FILE is not a file"),
            'export PYTORCH_ALLOC_CONF="expandable_segments:True"',
        ),
        launcher="torchrun",
        launcher_group=ArgGroup(
            "DISTRIBUTED_ARGS",
            "torchrun: one process per device on every host, c10d rendezvous",
            (
                flag("--nnodes", cluster.num_hosts),
                flag("--nproc_per_node", cluster.processes_per_host),
                flag("--rdzv_id", 101),
                flag("--rdzv_backend", "c10d"),
                flag("--rdzv_endpoint", Ref("RDZV_ENDPOINT")),
                flag("--local-ranks-filter", 0),
                flag("--role", "rank"),
                flag("--tee", 3),
            ),
        ),
        groups=(ArgGroup("RUN_ARGS", "the job config and the run's choices", RUN_FLAGS),),
        workdir="TORCHTITAN_DIR",
        entry="-m torchtitan.train",
    )


def launch_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The torchrun script and the TOML job config beside it."""
    return (
        LaunchFile(SCRIPT_NAME, script(launch, title).render(), executable=True),
        LaunchFile(CONFIG_NAME, render_toml(launch), executable=False),
    )
