"""One launcher per framework, and the two public entry points that use them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autotune.launch import _deepspeed
from autotune.launch import _megatron
from autotune.launch import _mindspeed
from autotune.launch import _nemo
from autotune.launch import _torchtitan
from autotune.launch._script import Flag
from autotune.launch._script import Launch
from autotune.launch._script import LaunchFile
from autotune.simulators import Job
from autotune.simulators import Layout
from autotune.simulators import LayoutError
from autotune.simulators import TrainSpec
from autotune.simulators import UserError
from autotune.simulators.files import write_atomically


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchFlags:
    """The options a framework's launch sets from the layout, for people to read.

    ``framework`` is the name in ``conf/framework/``, ``release`` the release of it the options
    are for (``framework.release``), ``title`` the stack's usual name; ``refused`` lists, one
    sentence each, what that release cannot run of the job (then ``flags`` is empty and
    :func:`write_launch_files` refuses it).
    """

    framework: str
    release: str
    title: str
    flags: tuple[str, ...]
    refused: tuple[str, ...]


def _no_refusals(launch: Launch) -> list[str]:
    return []


@dataclass(frozen=True, slots=True, kw_only=True)
class _Launcher:
    title: str
    files: Callable[[Launch, str], tuple[LaunchFile, ...]]
    layout_flags: Callable[[Launch], tuple[Flag, ...]]
    refusals: Callable[[Launch], list[str]] = _no_refusals


def _megatron_core_files(launch: Launch, title: str) -> tuple[LaunchFile, ...]:
    """The Megatron-LM script and, where NeMo has the model's recipe, its override."""
    return (*_megatron.launch_files(launch, title), *_nemo.launch_files(launch, "NeMo 2.0"))


# conf/framework/<name> -> how to launch it. megatron_lm (the 2020-22 stack, as the
# simulators price it) is launched with today's Megatron-LM and that stack's overlap facts.
_LAUNCHERS = {
    "megatron_core": _Launcher(
        title="Megatron-LM (Megatron-Core)",
        files=_megatron_core_files,
        layout_flags=_megatron.layout_flags,
    ),
    "megatron_lm": _Launcher(
        title="Megatron-LM", files=_megatron.launch_files, layout_flags=_megatron.layout_flags
    ),
    "mindspeed": _Launcher(
        title="MindSpeed-LLM",
        files=_mindspeed.launch_files,
        layout_flags=_mindspeed.layout_flags,
    ),
    "megatron_deepspeed": _Launcher(
        title="Megatron-DeepSpeed",
        files=_deepspeed.launch_files,
        layout_flags=_deepspeed.layout_flags,
        refusals=_deepspeed.refusals,
    ),
    "torchtitan": _Launcher(
        title="torchtitan",
        files=_torchtitan.launch_files,
        layout_flags=_torchtitan.layout_flags,
        refusals=_torchtitan.refusals,
    ),
}


def _launcher(train: TrainSpec) -> _Launcher:
    name = train.framework.name
    if name not in _LAUNCHERS:
        raise UserError(
            f"no launcher for framework {name!r}; launchers: {', '.join(sorted(_LAUNCHERS))}"
        )
    return _LAUNCHERS[name]


def layout_flags(job: Job, layout: Layout) -> LaunchFlags:
    """The options the job's framework release is launched with for this layout (degrees,
    batch, layer split, recompute, overlaps), as one ``--flag value`` string each.

    Example:
        >>> from autotune import catalog
        >>> from autotune.simulators import Layout
        >>> job = catalog.load_job("llama70b", "h100")
        >>> flags = layout_flags(job, Layout.resolve(64, tp=8))
        >>> flags.title, flags.flags[0]
        ('Megatron-LM (Megatron-Core)', '--tensor-model-parallel-size 8')
    """
    launch = Launch(job=job, layout=layout)
    launcher = _launcher(job.train)
    refused = tuple(launcher.refusals(launch))
    return LaunchFlags(
        framework=job.train.framework.name,
        release=job.train.framework.release,
        title=launcher.title,
        flags=() if refused else tuple(f.text() for f in launcher.layout_flags(launch)),
        refused=refused,
    )


def write_launch_files(job: Job, layout: Layout, out_dir: str | Path) -> list[Path]:
    """Write the ready-to-run launch files of the job's framework into ``out_dir``.

    Megatron-LM and MindSpeed-LLM get a bash script, Megatron-DeepSpeed a script and its
    ``ds_config.json``, torchtitan a torchrun script and its TOML job config, and a
    Megatron-Core job also a NeMo 2.0 recipe override when NeMo has
    the model's recipe. Every option is one the framework's release (``framework.release``)
    accepts. Scripts are executable; each starts with a comment naming the release, the job and
    the layout, then the variables autotune cannot know (data, tokenizer, checkpoints,
    length, learning rate, the node's rank). The folder is created if needed. Each file is
    written whole or not at all, and replaces what stands at its name (a symbolic link there
    is replaced, never written through).

    Returns:
        The paths written, in order.

    Raises:
        LayoutError: the layout breaks a rule, or the framework's release cannot run it.
        SpecError: the training step cannot run on the cluster (FP8 without FP8 cores).
        UserError: the framework has no launcher, or a folder, FIFO or device stands at a
            file's name.
        OSError: a file could not be written (the disk is full, ...).
    """
    layout.check(job)
    job.train.check_on(job.cluster)
    launcher = _launcher(job.train)
    launch = Launch(job=job, layout=layout)
    refused = launcher.refusals(launch)
    if refused:
        framework = job.train.framework
        raise LayoutError(
            f"layout {layout.describe()} cannot be launched on {framework.name} "
            f"{framework.release}:\n  - " + "\n  - ".join(refused)
        )
    files = launcher.files(launch, launcher.title)
    folder = Path(out_dir)
    written = []
    for file in files:
        path = folder / file.name
        write_atomically(path, file.text, follow_symlinks=False, executable=file.executable)
        written.append(path)
    return written
