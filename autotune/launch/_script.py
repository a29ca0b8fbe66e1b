"""What every launch file shares: the job, flags, shell variables, bash arrays, torchrun.

A launch script is data first (:class:`BashScript`: variables, setup lines, argument groups,
the command) and text second (:meth:`BashScript.render`), so a framework module only says
which flags a job needs. Flags hold literal values or references to the script's variables
(:class:`Ref`); literals are quoted for bash, references expand at run time. Text for people
(the header naming the job, which holds the model's and the cluster's names) goes into
comments through :func:`comment`, which keeps it on its line whatever it holds.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from autotune.launch._releases import accepts
from autotune.launch._releases import written_for
from autotune.simulators import ClusterSpec
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import ModelSpec
from autotune.simulators import TrainSpec
from autotune.simulators.names import one_line


@dataclass(frozen=True, slots=True, kw_only=True)
class Launch:
    """What a launch file starts: the job and its layout."""

    job: Job
    layout: Layout

    def precision_notes(self) -> list[str]:
        """One sentence for the header when the launch runs another dtype than the job names:
        a bf16 job on a device without bf16 runs in fp16, priced at the fp16 peak with the
        state bytes of a bf16 run, which fp16 with the same gradient dtype holds too."""
        job = self.job
        asked = job.train.compute_dtype
        if job.dtype == asked:
            return []
        grads = "fp32" if job.train.reduces_grads_in_fp32 else "fp16"
        return [
            f"{job.cluster.device.name} has no {asked}: this {asked} job runs in {job.dtype}, "
            f"as the simulators price it ({job.dtype} peak, 2-byte weights and activations, "
            f"{grads} gradients)."
        ]

    @property
    def chunk_layers(self) -> tuple[int, ...]:
        """Layers of every virtual stage, vpp-major (``Layout.chunk_layers``)."""
        return self.layout.chunk_layers(self.job.model, self.job.train)

    @property
    def uneven(self) -> bool:
        """Whether the (virtual) stages hold different numbers of layers."""
        return len(set(self.chunk_layers)) > 1

    def accepts(self, option: str) -> bool:
        """Whether the framework's release takes ``option`` (``--name`` or ``--name value``;
        :mod:`autotune.launch._releases`)."""
        return accepts(self.job.train.framework, option)

    def written_for(self, what: str) -> str:
        """The header's first sentence: ``what`` and the release it was written for."""
        return written_for(self.job.train.framework, what)

    def describe(self) -> str:
        """The job in one line, for headers: model, cluster, layout, per-stage layers."""
        model, cluster, train = self.job.model, self.job.cluster, self.job.train
        stages = "/".join(map(str, self.layout.stage_layers(model, train)))
        return (
            f"{model.name} on {cluster.name} ({cluster.num_nodes} nodes x "
            f"{cluster.devices_per_node} devices), seq {train.seq_len}, global "
            f"batch {train.global_batch_size}, {self._precision()}; layout "
            f"{self.layout.describe()}, layers per pipeline stage {stages}"
        )

    def _precision(self) -> str:
        """The job's precision as launched: ``fp8``, or the dtype the device runs."""
        return "fp8" if self.job.train.fp8 else self.job.dtype


def number(value: float) -> str:
    """A float as the shortest text that reads back exactly (``1e-05``, ``8.0``)."""
    return repr(float(value))


def has_linear_bias(model: ModelSpec) -> bool:
    """Biases on every linear layer: the GPT family, as ``ModelSpec.mlp_params`` counts them."""
    return model.is_gpt_family


def dropout_flags(model: ModelSpec, train: TrainSpec) -> list[Flag]:
    """The dropout the simulators price (``TrainSpec.dropout_of``): the run's, else off for
    every model but the GPT family, as their recipes train them; for the GPT family the
    Megatron stacks' own default of 0.1 (docs/reference.md 3.3)."""
    if train.dropout is None and model.is_gpt_family:
        return []
    value = str(train.dropout_of(model))
    return [flag("--attention-dropout", value), flag("--hidden-dropout", value)]


@dataclass(frozen=True, slots=True)
class Ref:
    """A reference to a script variable, expanded by bash at run time: ``"${NAME}"``."""

    name: str


Value = str | int | Ref


@dataclass(frozen=True, slots=True)
class Flag:
    """One command-line option and its values (none for a switch)."""

    name: str
    values: tuple[Value, ...] = ()

    def shell(self) -> str:
        """The option as bash words: literals quoted, references expanded in double quotes."""
        words = [_quote(self.name)]
        for value in self.values:
            words.append(f'"${{{value.name}}}"' if isinstance(value, Ref) else _quote(value))
        return " ".join(words)

    def text(self) -> str:
        """The option for people to read (``--lr $LR``)."""
        words = [self.name]
        for value in self.values:
            words.append(f"${value.name}" if isinstance(value, Ref) else _quote(value))
        return " ".join(words)


def flag(name: str, *values: Value) -> Flag:
    """``flag("--seq-length", 8192)``: an option with its values."""
    return Flag(name, values)


def _quote(value: str | int) -> str:
    return shlex.quote(str(value))


def comment(text: str) -> str:
    """``text`` as one comment line of bash or Python (``# text``): a line break or any other
    character that is not printable is written as its escape (``\\n``), so nothing in the
    text can end the comment and start a command."""
    return f"# {one_line(text)}".rstrip()


@dataclass(frozen=True, slots=True)
class Variable:
    """A variable at the top of a script: exported values win, else the default.

    ``default`` is a bash word inside double quotes (it may name an earlier variable).
    """

    name: str
    default: str
    doc: str

    def shell(self) -> str:
        return f'{self.name}="${{{self.name}:-{self.default}}}"  {comment(self.doc)}'


@dataclass(frozen=True, slots=True)
class ArgGroup:
    """A bash array of options. With ``when`` (a variable name) the array holds ``flags``
    when that variable is set and ``otherwise`` when it is empty."""

    name: str
    doc: str
    flags: tuple[Flag, ...]
    when: str = ""
    otherwise: tuple[Flag, ...] = ()

    def shell(self) -> list[str]:
        if not self.when:
            return [comment(self.doc), *_array(self.name, self.flags, "")]
        return [
            comment(self.doc),
            f'if [[ -n "${{{self.when}}}" ]]; then',
            *_array(self.name, self.flags, "    "),
            "else",
            *_array(self.name, self.otherwise, "    "),
            "fi",
        ]


def _array(name: str, flags: tuple[Flag, ...], indent: str) -> list[str]:
    if not flags:
        return [f"{indent}{name}=()"]
    return [f"{indent}{name}=(", *(f"{indent}    {f.shell()}" for f in flags), f"{indent})"]


def require(condition: str, message: str) -> str:
    """A guard line: stop with ``message`` when the bash test ``condition`` holds."""
    return f'if [[ {condition} ]]; then echo "{message}" >&2; exit 1; fi'


@dataclass(frozen=True, slots=True, kw_only=True)
class BashScript:
    """A launch script: header comment, variables, setup, argument arrays, one command.

    ``launcher`` runs ``entry`` from the folder in variable ``workdir`` with the groups
    ``launcher_group`` (its own options) and ``groups`` (the entry point's), in order.
    """

    header: tuple[str, ...]
    variables: tuple[Variable, ...]
    setup: tuple[str, ...]
    launcher: str
    launcher_group: ArgGroup
    groups: tuple[ArgGroup, ...]
    workdir: str
    entry: str

    def render(self) -> str:
        """The script's text: bash, ending with a newline."""
        lines = ["#!/usr/bin/env bash", *map(comment, self.header), ""]
        lines += ['SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"', ""]
        lines += ["# What autotune cannot know: export these or edit the defaults."]
        lines += [v.shell() for v in self.variables]
        lines += ["", *self.setup, "set -euo pipefail", ""]
        for group in (self.launcher_group, *self.groups):
            lines += [*group.shell(), ""]
        command = [
            f'"${{{self.launcher_group.name}[@]}}"',
            self.entry,
            *(f'"${{{group.name}[@]}}"' for group in self.groups),
        ]
        lines += [f'cd "${{{self.workdir}}}"']
        lines += [f"{self.launcher} " + " \\\n    ".join(command)]
        return "\n".join(lines) + "\n"


RUN_HINT = "Run it on every node: NODE_RANK=<rank> MASTER_ADDR=<node 0> bash <this file>."

# Where the processes meet; the defaults start a single node.
CLUSTER_VARIABLES = (
    Variable("NODE_RANK", "0", "this node's rank, 0 to nodes-1 (a different one on each node)"),
    Variable("MASTER_ADDR", "localhost", "address of the node with rank 0"),
    Variable("MASTER_PORT", "6000", "a free TCP port on that node"),
)

# How long to train and where to keep checkpoints (the run's choices, not the layout's).
RUN_VARIABLES = (
    Variable("TRAIN_ITERS", "100", "optimizer steps to run"),
    Variable("LR", "1.0e-4", "peak learning rate"),
    Variable("LOG_INTERVAL", "10", "steps between log lines"),
    Variable("CHECKPOINT_DIR", "${SCRIPT_DIR}/checkpoints", "saved to and resumed from here"),
    Variable("SAVE_INTERVAL", "${TRAIN_ITERS}", "steps between checkpoints"),
)


def distributed_group(cluster: ClusterSpec) -> ArgGroup:
    """torchrun's options: one process per device on every host (torch.distributed.run;
    a host is a node unless the cluster says otherwise, as a GB200 rack's 4-GPU trays)."""
    return ArgGroup(
        "DISTRIBUTED_ARGS",
        "torchrun: one process per device, on every host",
        (
            flag("--nproc-per-node", cluster.processes_per_host),
            flag("--nnodes", cluster.num_hosts),
            flag("--node-rank", Ref("NODE_RANK")),
            flag("--master-addr", Ref("MASTER_ADDR")),
            flag("--master-port", Ref("MASTER_PORT")),
        ),
    )


def run_group() -> ArgGroup:
    """Length, learning rate, logging and checkpoints, read from the run variables.

    Evaluation is off (``--eval-iters 0``): the script trains. ``--save`` needs
    ``--save-interval`` (Megatron-LM ``megatron/training/arguments.py`` validate_args).
    """
    return ArgGroup(
        "RUN_ARGS",
        "the run: length, learning rate, logging, checkpoints (variables above)",
        (
            flag("--train-iters", Ref("TRAIN_ITERS")),
            flag("--lr", Ref("LR")),
            flag("--log-interval", Ref("LOG_INTERVAL")),
            flag("--eval-iters", 0),
            flag("--save", Ref("CHECKPOINT_DIR")),
            flag("--load", Ref("CHECKPOINT_DIR")),
            flag("--save-interval", Ref("SAVE_INTERVAL")),
        ),
    )


def device_connections_export(launch: Launch, fsdp: bool = False) -> tuple[str, ...]:
    """``CUDA_DEVICE_MAX_CONNECTIONS=1`` when tp > 1 or cp > 1.

    Megatron-LM's validate_args refuses TP or CP without it before Blackwell, and MindSpeed
    reports its NPUs as such a device (``get_device_arch_version`` patched to 8), so the rule
    holds on Ascend too; Megatron-DeepSpeed needs it for sequence parallelism, which needs TP.
    Megatron-FSDP (ZeRO-2 and -3 on Megatron-LM) asserts the opposite and only warns about
    TP or CP beside it (arguments.py at core_v0.19.0), so its jobs (``fsdp``) leave it unset.
    """
    if fsdp:
        return ()
    if launch.layout.tp > 1 or launch.layout.cp > 1:
        return ("export CUDA_DEVICE_MAX_CONNECTIONS=1",)
    return ()


@dataclass(frozen=True, slots=True)
class LaunchFile:
    """One file to write: its name, text, and whether it is run directly."""

    name: str
    text: str
    executable: bool
