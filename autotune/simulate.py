"""``python -m autotune.simulate``: predict one layout, with the full breakdown.

    python -m autotune.simulate model=llama70b cluster=ascend parallel.tp=8 parallel.pp=4

Unset degrees are 1 and dp fills the rest of the world; a layout that breaks rules is
refused with every broken rule listed.
"""

from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

from autotune.cli import emit_json
from autotune.cli import guarded
from autotune.cli import load_job
from autotune.config import fixed_layout_values
from autotune.config import register_schemas
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_table
from simulators import BREAKDOWN_KEYS
from simulators import ClusterSpec
from simulators import Layout
from simulators import ModelSpec
from simulators import Simulator
from simulators import TrainSpec
from simulators import UserError

register_schemas()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@guarded
def main(cfg: DictConfig) -> None:
    model, cluster, train, simulator = load_job(cfg)
    layout = Layout.resolve(cluster.num_devices, **fixed_layout_values(cfg))
    layout.check(model, cluster, train)
    prediction = simulator.simulate(model, cluster, train, layout)
    if cfg.trace:
        _write_trace(simulator, model, cluster, train, layout, str(cfg.trace))
    if cfg.output == "json":
        emit_json(
            {
                "layout": layout.as_dict(),
                "world_size": layout.world_size,
                "simulator": simulator.name,
                "prediction": prediction.as_dict(),
            }
        )
        return
    print(
        f"{model.name} on {cluster.name} ({cluster.num_devices} devices), seq {train.seq_len}, "
        f"global batch {train.global_batch_size}, {layout.num_microbatches(train)} "
        f"micro-batches per step; {simulator.name} simulator\n"
    )
    print(layout_table([(layout, prediction)]))
    print("\nTime breakdown per step (seconds):")
    print(breakdown_table([(layout, prediction)]))
    shares = ", ".join(
        f"{k} {100 * prediction.breakdown[k] / prediction.step_time_s:.1f}%"
        for k in BREAKDOWN_KEYS
        if prediction.breakdown.get(k)
    )
    print(f"  shares: {shares}")
    memory = ", ".join(f"{k} {v:.2f}" for k, v in prediction.memory_breakdown_gib.items())
    print(f"\nPeak memory of the worst rank (GiB): {memory}")
    print("\n" + launch_text(model, train, layout))


def _write_trace(
    simulator: Simulator,
    model: ModelSpec,
    cluster: ClusterSpec,
    train: TrainSpec,
    layout: Layout,
    path: str,
) -> None:
    """Write the event timeline as a Chrome trace, if the simulator has one."""
    write = getattr(simulator, "write_trace", None)
    if write is None:
        raise UserError(
            f"trace= needs a simulator with an event timeline (simulator=hierarchical); "
            f"{simulator.name} has none"
        )
    write(model, cluster, train, layout, path)
    print(f"trace written to {path} (open it in https://ui.perfetto.dev)", file=sys.stderr)


if __name__ == "__main__":
    main()
