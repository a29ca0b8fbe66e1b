"""``python -m autotune.profile``: time the layout's operators and write a cost table.

The layers of the layout are recorded on the meta device as the hierarchical simulator
records them; each distinct operator is run on this machine's device and timed
(:mod:`simulators.hierarchical.profile`). The table prices those operators in
``simulator=hierarchical simulator.op_costs=<out>``.
"""

from __future__ import annotations

import sys

from autotune.cli import Command
from autotune.cli import emit_json
from autotune.config import ProfileConfig
from autotune.config import fixed_layout_values
from catalog import job_from_config
from simulators import Layout
from simulators import UserError
from simulators.hierarchical.graph import layer_shapes
from simulators.hierarchical.profile import profile_shapes
from simulators.hierarchical.profile import resolve_device
from simulators.hierarchical.profile import write_table


def profile_layout(config: ProfileConfig) -> None:
    """Profile the operators of ``config``'s layout and write the table to ``config.out``."""
    if config.repeats < 1:
        raise UserError(f"repeats={config.repeats} must be >= 1")
    if config.limit is not None and config.limit < 1:
        raise UserError(f"limit={config.limit} must be >= 1 (or null for all operators)")
    job = job_from_config(config)
    layout = Layout.resolve(job.cluster.num_devices, **fixed_layout_values(config.parallel))
    layout.check(job.model, job.cluster, job.train)
    device = resolve_device(config.device)
    shapes = layer_shapes(job.model, layout, job.train, job.cluster)
    rows = profile_shapes(shapes.values(), device, repeats=config.repeats, limit=config.limit)
    path = write_table(rows, config.out)
    if config.output == "json":
        emit_json({"device": device, "operators": len(rows), "table": str(path)})
        return
    print(f"timed {len(rows)} operators on {device} -> {path}")
    print(f"use it with: simulator=hierarchical simulator.op_costs={path}")


COMMAND = Command(
    module="autotune.profile",
    config_name="profile",
    schema=ProfileConfig,
    summary=(
        "Time the hierarchical simulator's operators for one layout on this machine's device\n"
        "(CPU, CUDA, or an Ascend NPU through torch_npu) and write a cost table that\n"
        "simulator=hierarchical simulator.op_costs=<out> prices them with."
    ),
    options=(
        ("model", "a model of conf/model/"),
        ("cluster", "a cluster of conf/cluster/"),
        ("parallel.<field>", "the layout, e.g. parallel.tp=8"),
        ("out", "the CSV table written"),
        ("device", "auto, cpu, cuda or npu"),
        ("repeats", "timed runs per operator"),
        ("limit", "at most this many distinct operators"),
    ),
    examples=(
        "python -m autotune.profile model=llama2_7b cluster=ascend cluster.num_nodes=1 "
        "parallel.tp=8 out=ops.csv",
        "python -m autotune.profile model=llama70b cluster=ascend parallel.tp=8 device=cuda",
        "python -m autotune.simulate model=llama2_7b cluster=ascend cluster.num_nodes=1 "
        "parallel.tp=8 simulator=hierarchical simulator.op_costs=ops.csv",
    ),
    run=profile_layout,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
