"""``python -m autotune.simulate``: predict one layout, with the full breakdown.

Unset degrees are 1 and dp fills the rest of the world; a layout that breaks rules is
refused with every broken rule listed. A simulator with per-rank views (hierarchical) adds
each pipeline rank's time and memory and the compute time by operator class, in the table
and under ``views`` in the JSON.
"""

from __future__ import annotations

import sys
import textwrap
from typing import Any

from autotune.calibrate import Margin
from autotune.calibrate import calibrated_job
from autotune.catalog import PricedJob
from autotune.catalog import priced_job_from_config
from autotune.cli import Command
from autotune.cli import Output
from autotune.cli import emit_json
from autotune.cli import job_inputs
from autotune.config import AutotuneConfig
from autotune.config import fixed_layout_values
from autotune.report import breakdown_table
from autotune.report import launch_text
from autotune.report import layout_table
from autotune.report import op_class_table
from autotune.report import op_costs_text
from autotune.report import rank_table
from autotune.report import rank_views
from autotune.simulators import BREAKDOWN_KEYS
from autotune.simulators import Layout
from autotune.simulators import Prediction
from autotune.simulators import UserError
from autotune.simulators.files import write_failure
from autotune.simulators.registry import TRACE_WRITERS


def simulate_layout(config: AutotuneConfig) -> None:
    """Predict the layout of ``config.parallel`` and print it (or its JSON object)."""
    priced, margin = calibrated_job(
        priced_job_from_config(config), config.calibration, config.search.memory_margin
    )
    job, simulator = priced.job, priced.simulator
    layout = Layout.resolve(job.cluster.num_devices, **fixed_layout_values(config.parallel))
    layout.check(job)
    if config.trace and simulator.name not in TRACE_WRITERS:
        writers = " or ".join(f"simulator={name}" for name in TRACE_WRITERS)
        raise UserError(
            f"trace= needs a simulator with an event timeline ({writers}); "
            f"{simulator.name} has none"
        )
    prediction = simulator.simulate(job, layout)
    _print_prediction(config, priced, layout, prediction, margin)
    if config.trace:  # after the result, which it cannot lose
        try:
            simulator.write_trace(job, layout, config.trace)
        except (OSError, UserError) as exc:
            raise UserError("trace: " + write_failure(config.trace, exc)) from None
        print(
            f"trace written to {config.trace} (open it in https://ui.perfetto.dev)",
            file=sys.stderr,
        )


def _print_prediction(
    config: AutotuneConfig,
    priced: PricedJob,
    layout: Layout,
    prediction: Prediction,
    margin: Margin,
) -> None:
    """The prediction as tables (or the JSON object of ``output=json``)."""
    job, simulator = priced.job, priced.simulator
    model, cluster, train = job.model, job.cluster, job.train
    views = rank_views(prediction)
    costs, warning = op_costs_text(views) if views and "op_costs" in views else ("", None)
    if warning:
        print(warning, file=sys.stderr)
    if config.output == "json":
        payload = {
            "layout": layout.as_dict(),
            "world_size": layout.world_size,
            "simulator": simulator.name,
            "calibration": config.calibration,
            "memory_margin": margin.value,
            "prediction": prediction.as_dict(),
        }
        if views is not None:
            payload["views"] = views
        emit_json(payload)
        return
    print(
        f"{model.name} on {cluster.name} ({cluster.num_devices} devices), seq {train.seq_len}, "
        f"global batch {train.global_batch_size}, {layout.num_microbatches(train)} "
        f"micro-batches per step\n{train.describe()}; {simulator.name} simulator"
        + (f", calibration {config.calibration}" if config.calibration else "")
        + f"\n{margin.text()}\n"
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
    measured = prediction.detail.get("measured_in_history")
    if measured is not None:
        print(
            f"  the calibration's history: this layout ran {measured:.3f}x its calibrated "
            "prediction, against the other layouts of its job, on a model of the same layer "
            "at this job's shape (docs/decisions/0065)"
        )
    _print_memory(prediction)
    if views is not None:
        _print_views(views, costs)
    print("\nLaunch flags:\n" + launch_text(job, layout))


def _print_memory(prediction: Prediction) -> None:
    """The worst rank's peak by term, as each measure counts it, and the first pipeline
    rank's where it is not the worst (what a reading on rank 0 alone shows, 0069)."""
    memory = ", ".join(f"{k} {v:.2f}" for k, v in prediction.memory_breakdown_gib.items())
    print("\n" + textwrap.fill(f"Peak memory of the worst rank (GiB): {memory}", 100))
    peaks = prediction.readings_gib()
    print(
        f"  as measured: {peaks['allocated']:.2f} allocated (tensors), {peaks['reserved']:.2f} "
        f"reserved (allocator), {peaks['device']:.2f} device (nvidia-smi)"
    )
    if round(peaks["device@first"], 2) != round(peaks["device"], 2):
        print(
            f"  the first pipeline rank's: {peaks['allocated@first']:.2f} allocated, "
            f"{peaks['reserved@first']:.2f} reserved, {peaks['device@first']:.2f} device"
        )


def _print_views(views: dict[str, Any], costs: str) -> None:
    """The per-rank tables of a simulator that has them (hierarchical)."""
    slowest = views["slowest_rank"]
    print(
        f"\nPer pipeline rank ({views['schedule']} schedule, the step is rank {slowest}'s; "
        "states: weights, gradients and optimizer):"
    )
    print(rank_table(views))
    print(f"\nCompute time by operator class, rank {slowest} (seconds per step):")
    print(op_class_table(views))
    if costs:
        print(f"\n{costs}")


def simulate_outputs(config: AutotuneConfig) -> tuple[Output, ...]:
    """What ``autotune.simulate`` writes: the trace, when asked."""
    return (Output("trace", config.trace),) if config.trace else ()


COMMAND = Command(
    module="autotune.simulate",
    config_name="config",
    schema=AutotuneConfig,
    summary=(
        "Predict the step time, memory and time breakdown of one layout. Unset degrees are 1\n"
        "and dp fills the rest of the world; a layout that breaks a rule is refused with every\n"
        "broken rule listed."
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
        ("train.dropout", "dropout probability (unset: the model's recipe)"),
        ("train.<setting>", "tp_comm_overlap, cp_comm_type, ... (conf/train/default.yaml)"),
        ("simulator", "the simulator that prices a layout (Simulators: below)"),
        ("simulator.op_costs", "operator costs profiled by autotune.profile (hierarchical)"),
        ("calibration", "a calibration: NAME of ./calibrations/ or ./PATH.yaml"),
        ("search.memory_margin", "a fit keeps this share of memory free (unset: derived)"),
        ("parallel.<field>", "a layout field, e.g. parallel.tp=8 parallel.pp=4"),
        ("trace", "write a Chrome trace of the timeline (hierarchical)"),
        ("output", "table or json"),
    ),
    examples=(
        "python -m autotune.simulate model=llama70b cluster=ascend parallel.tp=8 parallel.pp=4",
        "python -m autotune.simulate model=llama70b cluster=ascend parallel.tp=8 "
        "simulator=hierarchical trace=trace.json",
        "python -m autotune.simulate model=mixtral_8x7b cluster=h100 parallel.ep=8 output=json",
    ),
    run=simulate_layout,
    outputs=simulate_outputs,
    inputs=job_inputs,
)

main = COMMAND.main


if __name__ == "__main__":
    sys.exit(main())
