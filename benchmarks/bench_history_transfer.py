"""What a cluster's history says of a new model's layouts: the evidence behind
docs/calibration.md 7 ("Cluster history") and decision 0065, on the leave-one-model-out
protocol.

    python benchmarks/bench_history_transfer.py [hierarchical]   # writes benchmark_results/
    python benchmarks/bench_history_transfer.py --refresh        # updates benchmarks/results/

Over the shipped rows that ran, per history (source, cluster, framework) with several models:
a layout's *within-job residual* is ``log(measured / predicted)`` minus its job's mean, what
ranks it against the job's other layouts beyond the simulator. Two models of a history that
measured the same layout at the same job shape (devices, global batch, sequence) give two
within-job residuals of it; the first table says how alike they are (Pearson correlation over
the layouts both measured), for models with the same layer (hidden size, heads, FFN width:
only the depth differs) and for models with another.

The second gives, per history, the slope a model of how far a layout's residual carries to a
model of another layer would use (regressing one job's within-job residuals on another's, jobs
of one shape and two layers; docs/calibration.md 8).

The third table scores, per model with a twin of the same layer in its history, regret@1 of
the pick (mean over its scenarios) when the layouts are ranked by:
- ``zero-shot``: the simulator's prediction;
- ``own fit``: the simulator calibrated on every row of this model (``calibrate.fit``, in
  sample: the best a set of scale factors can do for this model's ranking);
- ``history, factors``: calibrated on the other models of the history, the factors alone
  (what ``leave_one_model_out`` scored before decision 0065);
- ``history, with its layouts``: the same calibration remembering what each measured layout
  ran beyond it against its job's other layouts (``calibrate.fit(..., layouts=True)``, what
  ``python -m autotune.calibrate`` writes and ``leave_one_model_out`` scores): a layout of
  this model takes its twin's.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
from _results import table_per_simulator

from autotune import calibrate
from autotune import catalog
from autotune import dataset
from autotune.calibrate import Run
from autotune.config import AutotuneConfig
from autotune.config import load_config
from autotune.simulators import Simulator
from autotune.simulators.calibrated import CalibratedSimulator
from autotune.simulators.calibration import Calibration

_MIN_SHARED = 10  # layouts two models both measured, at least, for a correlation


@dataclasses.dataclass(frozen=True, slots=True)
class _Rows:
    """The shipped rows that ran, with what this script keys them by."""

    table: pd.DataFrame  # history, layer, signature, predicted, model, job, measured, within
    runs: list[Run]


def _rows(simulator: Simulator) -> _Rows:
    priceable = dataset.priceable_rows(dataset.load_data("public"))
    runs = calibrate.row_runs(priceable.table, priceable.specs)
    ran = [(i, run) for i, run in enumerate(runs) if run is not None and run.status == "ok"]
    kept = [i for i, _ in ran]
    table = priceable.table.iloc[kept].reset_index(drop=True)
    records = []
    for i in kept:
        job, layout = priceable.specs[i]
        model, train = job.model, job.train
        records.append(
            {
                "history": f"{priceable.table['source'].iloc[i]} / {job.cluster.name} / "
                f"{train.framework.name}",
                "layer": f"h{model.hidden_size} a{model.num_attention_heads} "
                f"ffn{model.ffn_hidden_size}",
                "shape": f"gpus{job.cluster.num_devices} gbs{train.global_batch_size} "
                f"seq{train.seq_len}",
                "signature": f"gpus{job.cluster.num_devices} gbs{train.global_batch_size} "
                f"seq{train.seq_len} {layout.describe()}",
                "degrees": re.sub(r" split=\S+", "", layout.describe()),
                "predicted": simulator.simulate(job, layout).step_time_s,
            }
        )
    frame = pd.DataFrame(records)
    frame["model"] = table["model"].astype(str)
    frame["job"] = table["scenario"].astype(str)
    frame["measured"] = table["step_time_s"].astype(float)
    residual = np.log(frame["measured"] / frame["predicted"])
    frame["within"] = residual - residual.groupby(frame["job"]).transform("mean")
    return _Rows(frame, [run for _, run in ran])


def _agreement(rows: pd.DataFrame) -> list[str]:
    """Per history: how alike two models' within-job residuals of the same layouts are."""
    lines = [
        "| history | models | pairs (same layer / other) | layouts shared per pair "
        "| correlation, same layer (median, min) | correlation, other layer (median, min) |",
        "|---|---|---|---|---|---|",
    ]
    for history, group in rows.groupby("history", sort=True):
        wide = group.pivot_table(index="signature", columns="model", values="within")
        layer = group.groupby("model")["layer"].first()
        same: list[float] = []
        other: list[float] = []
        shared: list[int] = []
        for a_index, a in enumerate(wide.columns):
            for b in wide.columns[a_index + 1 :]:
                both = wide[[a, b]].dropna()
                if len(both) < _MIN_SHARED:
                    continue
                shared.append(len(both))
                r = float(np.corrcoef(both[a], both[b])[0, 1])
                (same if layer[a] == layer[b] else other).append(r)
        if not shared:
            continue
        lines.append(
            f"| {history} | {wide.shape[1]} | {len(same)} / {len(other)} "
            f"| {min(shared)}-{max(shared)} | {_spread(same)} | {_spread(other)} |"
        )
    return lines


def _carry(rows: pd.DataFrame) -> list[str]:
    """Per history: the slope that would carry a layout's within-job residual to a model of
    another layer, the regression through the origin of one job's residuals on another's over
    every pair of jobs of one shape (devices, batch, sequence) and two layers that measured two
    layouts or more alike (the same degrees and micro-batch; a layer split follows the depth),
    each job centred on the layouts they share; symmetric in the two jobs."""
    lines = [
        "| history | job pairs | layouts | slope |",
        "|---|---|---|---|",
    ]
    for history, group in rows.groupby("history", sort=True):
        jobs = [job for _, job in group.groupby("job") if job["degrees"].nunique() > 1]
        products = squares = 0.0
        pairs = layouts = 0
        for a, b in itertools.combinations(jobs, 2):
            first, second = a.iloc[0], b.iloc[0]
            if first["shape"] != second["shape"] or first["layer"] == second["layer"]:
                continue
            x = a.groupby("degrees")["within"].mean()
            y = b.groupby("degrees")["within"].mean()
            shared = x.index.intersection(y.index)
            if len(shared) < 2:
                continue
            x, y = x[shared] - x[shared].mean(), y[shared] - y[shared].mean()
            products += float((x * y).sum())
            squares += float((x**2 + y**2).sum()) / 2
            pairs, layouts = pairs + 1, layouts + len(shared)
        if pairs:
            lines.append(f"| {history} | {pairs} | {layouts} | {products / squares:.2f} |")
    return lines


def _spread(values: Sequence[float]) -> str:
    return f"{np.median(values):.2f}, {min(values):.2f}" if values else "-"


def _regret(frame: pd.DataFrame, score: np.ndarray) -> float:
    """Mean regret@1 over the jobs of ``frame`` with two layouts or more, ranked by ``score``."""
    regrets = []
    frame = frame.assign(score=score)
    for _, job in frame.groupby("job"):
        if len(job) >= 2:
            pick = job["measured"].iloc[int(np.argmin(job["score"].to_numpy()))]
            regrets.append(pick / job["measured"].min() - 1)
    return 100 * float(np.mean(regrets))


def _predicted(simulator: Simulator, calibration: Calibration, runs: list[Run]) -> np.ndarray:
    model = CalibratedSimulator(simulator, calibration, 0.0)
    return np.array([model.simulate(*run.specs).step_time_s for run in runs])


def _rankings(simulator: Simulator, rows: _Rows) -> list[str]:
    """Per model with a same-layer twin in its history: regret@1 under four rankings."""
    settings = dataclasses.replace(
        calibrate.fit_settings(load_config(AutotuneConfig).calibrate), bootstrap_samples=0
    )
    frame = rows.table
    lines = [
        "| history | model | scenarios | zero-shot | own fit | history, factors "
        "| history, with its layouts |",
        "|---|---|---|---|---|---|---|",
    ]
    for (history, model), group in frame.groupby(["history", "model"], sort=True):
        others = frame[(frame["history"] == history) & (frame["model"] != model)]
        scored = int((group.groupby("job").size() >= 2).sum())
        if not (others["layer"] == group["layer"].iloc[0]).any() or scored == 0:
            continue
        runs = [rows.runs[i] for i in group.index]
        own = calibrate.fit(simulator, runs, settings).calibration
        past = calibrate.fit(
            simulator, [rows.runs[i] for i in others.index], settings, layouts=True
        ).calibration
        regrets = [
            _regret(group, group["predicted"].to_numpy()),
            _regret(group, _predicted(simulator, own, runs)),
            _regret(group, _predicted(simulator, past.with_layouts({}), runs)),
            _regret(group, _predicted(simulator, past, runs)),
        ]
        lines.append(
            f"| {history} | {model} | {scored} | "
            + " | ".join(f"{r:.2f}%" for r in regrets)
            + " |"
        )
    return lines


def _table(simulator_name: str) -> str:
    simulator = catalog.load_simulator(simulator_name)
    rows = _rows(simulator)
    return "\n".join(
        [
            f"# What a cluster's history says of a new model ({simulator_name} simulator)",
            "",
            "Within-job residuals of the same layout, measured on two models of one history:",
            "",
            *_agreement(rows.table),
            "",
            "What a layout's residual would carry to another layer at the same job shape "
            "(docs/calibration.md 8):",
            "",
            *_carry(rows.table),
            "",
            "Regret@1 of each model with a same-layer twin in its history, by ranking:",
            "",
            *_rankings(simulator, rows),
        ]
    )


def main() -> None:
    table_per_simulator(__doc__.splitlines()[0], "history_transfer", _table)


if __name__ == "__main__":
    main()
