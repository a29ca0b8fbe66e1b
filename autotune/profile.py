"""``python -m autotune.profile``: time the layout's operators and write a cost table.

The layers of the layout are recorded on the meta device as the hierarchical simulator
records them; each distinct operator is run on this machine's device and timed
(:mod:`autotune.simulators.hierarchical.profile`), the cheapest first, within ``budget_s`` seconds
(``budget_s=null``: all of them). The table prices those operators in
``simulator=hierarchical simulator.op_costs=<out>``; the simulator's roofline prices the rest.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from autotune.catalog import job_from_config
from autotune.cli import Command
from autotune.cli import Output
from autotune.cli import emit_json
from autotune.config import ProfileConfig
from autotune.config import fixed_layout_values
from autotune.progress import Progress
from autotune.progress import duration
from autotune.simulators import Layout
from autotune.simulators import UserError
from autotune.simulators.files import write_failure
from autotune.simulators.hierarchical.cost import CostTable
from autotune.simulators.hierarchical.graph import layer_shapes
from autotune.simulators.hierarchical.profile import ProfileResult
from autotune.simulators.hierarchical.profile import profile_shapes
from autotune.simulators.hierarchical.profile import resolve_device
from autotune.simulators.hierarchical.profile import write_table

log = logging.getLogger("autotune")


def profile_layout(config: ProfileConfig) -> None:
    """Profile the operators of ``config``'s layout and write the table to ``config.out``."""
    job = job_from_config(config)
    layout = Layout.resolve(job.cluster.num_devices, **fixed_layout_values(config.parallel))
    layout.check(job)
    device = resolve_device(config.device)
    shapes = layer_shapes(job, layout)
    progress: Progress | None = None

    def report(done: int, total: int, left_s: float) -> None:
        nonlocal progress
        if progress is None:
            progress = Progress("profile", total, unit="operators")
        progress.update(done, left_s)

    result = profile_shapes(
        shapes.values(),
        device,
        repeats=config.repeats,
        limit=config.limit,
        budget_s=config.budget_s,
        progress=report,
    )
    path = Path(config.out)
    problem = _write(result, path)  # the summary is printed all the same, then this
    timed_on = CostTable(path=str(path), device=result.device, seconds={})
    if problem is None and not timed_on.profiled_on(job.cluster.device):
        log.warning(
            f"warning: timed on {result.device}, not on the cluster's {job.cluster.device.name}: "
            "the table holds this device's times"
        )
    if config.output == "json":
        emit_json(
            {
                "device": result.device,
                "table": None if problem else str(path),
                "operators": result.operators,
                "timed": len(result.rows),
                "no_kernel": result.no_kernel,
                "left_out": result.left_out,
                "left_out_estimate_s": round(result.left_out_s, 1),
                "seconds": round(result.seconds, 1),
            }
        )
    else:
        print("\n".join(_summary(result, None if problem else str(path), config.budget_s)))
    if problem is not None:
        raise UserError(problem)


def _write(result: ProfileResult, path: Path) -> str | None:
    """Write the table of ``result`` to ``path``; None, or why it was not written."""
    if not result.rows:  # a table without rows is no table: simulator.op_costs refuses one
        return (
            f"timed none of the layout's {result.operators} operators, so {path} was not "
            "written; give a larger budget_s (or null), or a device with kernels for them"
        )
    try:
        write_table(result.rows, path)
    except (OSError, UserError) as exc:
        return write_failure(path, exc)
    return None


def _summary(result: ProfileResult, path: str | None, budget_s: float | None) -> list[str]:
    """What was timed, what the roofline prices instead, and how to use the table (``path``
    None: it was not written)."""
    lines = [
        f"timed {len(result.rows)} of the layout's {result.operators} operators on "
        f"{result.device} in {duration(result.seconds)} -> {path or 'not written'}"
    ]
    if result.no_kernel:
        lines.append(
            f"  {result.no_kernel} have no kernel on {result.device} (e.g. fused attention): "
            "priced by the roofline"
        )
    if result.left_out:
        why = (
            "the limit" if budget_s is None else f"the {duration(budget_s)} budget (or the limit)"
        )
        lines.append(
            f"  {result.left_out} left out by {why}, about {duration(result.left_out_s)} more "
            "on this device:\n  priced by the roofline (budget_s=null times them all)"
        )
    if path is not None:
        lines.append(f"use it with: simulator=hierarchical simulator.op_costs={path}")
    return lines


def profile_outputs(config: ProfileConfig) -> tuple[Output, ...]:
    """What the profiler writes: the cost table."""
    return (Output("out", config.out),)


COMMAND = Command(
    module="autotune.profile",
    config_name="profile",
    schema=ProfileConfig,
    summary=(
        "Time the hierarchical simulator's operators for one layout on this machine's device\n"
        "(CPU, CUDA, or an Ascend NPU through torch_npu), the cheapest first within a time\n"
        "budget, and write a cost table that simulator=hierarchical simulator.op_costs=<out>\n"
        "prices them with (the roofline prices the operators left out)."
    ),
    options=(
        ("model", "a model of conf/model/"),
        ("cluster", "a cluster of conf/cluster/"),
        ("cluster.num_nodes", "nodes of the cluster"),
        ("parallel.<field>", "the layout, e.g. parallel.tp=8 parallel.pp=4"),
        ("out", "the CSV table written"),
        ("device", "auto, cpu, cuda or npu"),
        ("repeats", "timed runs per operator"),
        ("budget_s", "seconds of timing; null: every operator"),
        ("limit", "at most this many distinct operators"),
        ("output", "table or json"),
    ),
    examples=(
        "python -m autotune.profile model=llama70b cluster=ascend parallel.tp=8 out=ops.csv",
        "python -m autotune.profile model=llama70b cluster=ascend parallel.tp=8 device=cuda "
        "budget_s=null",
        "python -m autotune.simulate model=llama70b cluster=ascend parallel.tp=8 "
        "simulator=hierarchical simulator.op_costs=ops.csv",
    ),
    run=profile_layout,
    outputs=profile_outputs,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
