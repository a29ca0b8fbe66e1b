"""How well the probe loop's model of the simulator's step-time error predicts a source it was
not estimated on, Gaussian against Student t: the evidence of
docs/decisions/0057-jobs-differ-in-how-far-off-the-simulator-is.md.

    python benchmarks/bench_residual_model.py [hierarchical]   # writes benchmark_results/
    python benchmarks/bench_residual_model.py --refresh        # updates benchmarks/results/

First, how far each source's jobs lie from the Gaussian model estimated on every shipped row:
per job, the Mahalanobis distance squared of its residuals per layout (1 on average if the
model held), its median and maximum over the source's jobs; and the Student t estimated on the
same rows (degrees of freedom, and the factor of the Gaussian's covariance).

Then, for each source: the residual model (autotune/calibrate/_residuals.py) estimated on
every other source's shipped rows, as a Gaussian (every job at scale 1) and with the jobs'
scales varying (a multivariate Student t), and the log density of each of the source's jobs
under each, per layout of the job (higher is better; each job weighs the same, then each
source); and the Student t with the parts of the simulator's constants of
docs/decisions/0063-a-probe-says-what-it-says-of-the-hosts-pace.md (their sds the
``calibrate.prior`` widths), what the benchmark's probe protocol gives a source.
"""

from __future__ import annotations

import numpy as np
from _results import table_per_simulator

from autotune import catalog
from autotune.calibrate import ResidualModel
from autotune.calibrate import StepResiduals
from autotune.calibrate import fit_settings
from autotune.calibrate import given_widths
from autotune.calibrate import log_density
from autotune.calibrate import shipped_residuals
from autotune.config import AutotuneConfig
from autotune.config import load_config


def _distances(model: ResidualModel, rows: StepResiduals) -> dict[str, list[float]]:
    """Per source, each job's Mahalanobis distance squared per layout under ``model``."""
    found: dict[str, list[float]] = {}
    for job in sorted(set(rows.jobs)):
        mine = np.array([j == job for j in rows.jobs])
        features = rows.features.take(mine)
        cov = model.covariance(features, features) + model.own**2 * np.eye(len(features))
        d = rows.residuals[mine] - model.mean
        found.setdefault(job[0], []).append(float(d @ np.linalg.solve(cov, d)) / len(d))
    return found


def _per_layout(model: ResidualModel, held_out: StepResiduals) -> float:
    """Mean over the jobs of ``held_out`` of their log density per layout."""
    jobs = sorted(set(held_out.jobs))
    found = []
    for job in jobs:
        mine = np.array([j == job for j in held_out.jobs])
        density = log_density(model, held_out.residuals[mine], held_out.features.take(mine))
        found.append(density / int(mine.sum()))
    return float(np.mean(found))


def _table(simulator_name: str) -> str:
    config = load_config(AutotuneConfig, ["tracking.enabled=false"])
    given = given_widths(fit_settings(config.calibrate).prior)
    every = shipped_residuals(catalog.load_simulator(simulator_name))
    normal, heavy = every.estimate(scales=False), every.estimate()
    lines = [
        f"# The step-time residual model of the probe loop ({simulator_name} simulator)",
        "",
        "How far each source's jobs lie from the Gaussian model estimated on every shipped row "
        "(Mahalanobis distance squared per layout; 1 on average if the model held):",
        "",
        "| source | jobs | median | maximum |",
        "|---|---|---|---|",
    ]
    for source, found in sorted(_distances(normal, every).items()):
        lines.append(f"| {source} | {len(found)} | {np.median(found):.2f} | {np.max(found):.2f} |")
    lines += [
        "",
        f"The Student t on the same rows: {heavy.dof:.1f} degrees of freedom, the Gaussian's "
        f"covariance x{(heavy.sd / normal.sd) ** 2:.2f}.",
        "",
        "## On a source it was not estimated on",
        "",
        "Log density per layout of the held-out source's jobs (higher is better), under the "
        "model estimated on the other sources.",
        "",
        "| held-out source | jobs | layouts | Gaussian | Student t | degrees of freedom "
        "| Student t, constants' parts |",
        "|---|---|---|---|---|---|---|",
    ]
    gaussian, student, host = [], [], []
    for source in sorted(set(every.sources)):
        others = every.where(every.sources != source)
        held_out = every.where(every.sources == source)
        normal, heavy = others.estimate(scales=False), others.estimate()
        gaussian.append(_per_layout(normal, held_out))
        student.append(_per_layout(heavy, held_out))
        host.append(_per_layout(others.estimate(given=given), held_out))
        lines.append(
            f"| {source} | {len(set(held_out.jobs))} | {len(held_out.residuals)} "
            f"| {gaussian[-1]:+.2f} | {student[-1]:+.2f} | {heavy.dof:.1f} | {host[-1]:+.2f} |"
        )
    lines.append(
        f"| **mean over {len(gaussian)} sources** | | | **{np.mean(gaussian):+.2f}** "
        f"| **{np.mean(student):+.2f}** | | **{np.mean(host):+.2f}** |"
    )
    return "\n".join(lines)


def main() -> None:
    table_per_simulator(__doc__.splitlines()[0], "residual_model", _table)


if __name__ == "__main__":
    main()
