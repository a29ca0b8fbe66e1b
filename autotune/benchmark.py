"""``python -m autotune.benchmark``: which simulator picks layouts that are really fast?

Every chosen simulator predicts every measured layout; per scenario (the rows with the same
``scenario``: alternatives for one job) the layouts are ranked by predicted time, those
predicted not to fit last, and the pick is scored by its regret against the best measured
layout. Baselines (``random``, ``heuristic``) and any peer predictions in the data
(``predictor``) are scored the same way. Settings: ``conf/benchmark.yaml``.

Example::

    python -m autotune.benchmark                                  # all shipped data, table
    python -m autotune.benchmark data=vtrain output=json tracking.enabled=false
    python -m autotune.benchmark data=my_runs.csv hardware=[a100,h100]
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.config_store import ConfigStore
from omegaconf import MISSING
from omegaconf import DictConfig
from omegaconf import ListConfig
from omegaconf import OmegaConf

import dataset
from autotune._benchmark_rankers import HeuristicRule
from autotune._benchmark_rankers import Ranking
from autotune._benchmark_rankers import heuristic_ranking
from autotune._benchmark_rankers import peer_rankings
from autotune._benchmark_rankers import simulate
from autotune._benchmark_report import console_tables
from autotune._benchmark_report import json_payload
from autotune._benchmark_report import write_report
from autotune._benchmark_score import RANDOM
from autotune._benchmark_score import BenchmarkResult
from autotune._benchmark_score import ScoreSettings
from autotune._benchmark_score import score
from autotune.cli import guarded
from autotune.config import simulator_from_conf
from simulators import UserError

__all__ = [
    "BenchmarkSchema",
    "load_data",
    "main",
    "register_benchmark_schema",
    "run",
    "run_benchmark",
]

log = logging.getLogger("autotune.benchmark")
BASELINES = (RANDOM, "heuristic")
OUTPUTS = ("table", "json")


@dataclass
class HeuristicSchema:
    state_memory_fraction: float = MISSING  # share of device memory the states may fill
    bytes_per_param: float = MISSING  # weights + gradients + optimizer states, bytes
    optimizer_bytes_per_param: float = MISSING  # the part the distributed optimizer shards


@dataclass
class TrackingSchema:
    enabled: bool = True  # record the benchmark as one MLflow run
    uri: str = "sqlite:///mlruns/mlflow.db"  # MLflow tracking URI (always set explicitly)
    experiment: str = "benchmark"


@dataclass
class BenchmarkSchema:
    simulators: Any = field(default_factory=lambda: ["analytical"])  # names, or one name
    baselines: Any = field(default_factory=lambda: list(BASELINES))
    peers: bool = True  # score predictions carried in the data (`predictor` column)
    data: str = "public"  # public, a shipped source name, or a path to a schema-v1 file
    hardware: Any = None  # keep only these cluster names (one name or a list)
    source: Any = None  # keep only these sources (one name or a list)
    output: str = "table"  # table or json (one JSON object on stdout)
    report_dir: str = "benchmark_report"
    top_k: int = 3  # the k of regret@k
    oom_penalty_regret: float = MISSING  # regret charged for picking a layout that OOMed
    bootstrap_samples: int = 2000  # resamples for the 95% interval of mean regret
    seed: int = 0  # seed of the bootstrap
    heuristic: HeuristicSchema = field(default_factory=HeuristicSchema)
    tracking: TrackingSchema = field(default_factory=TrackingSchema)


def register_benchmark_schema() -> None:
    """Register the schema that ``conf/benchmark.yaml`` names first in its defaults."""
    ConfigStore.instance().store(name="benchmark_schema", node=BenchmarkSchema)


def _names(value: Any) -> list[str] | None:
    """A name or list of names from the command line (``x``, ``[x,y]``); None for no filter."""
    if value is None:
        return None
    if isinstance(value, ListConfig | list | tuple):
        return [str(v) for v in value]
    return [str(value)]


def load_data(data: str) -> pd.DataFrame:
    """The measurement table for ``data=``: ``public``, a shipped source, or a file path.

    Raises:
        UserError: an unknown source name, or a malformed file (every problem listed).
    """
    if data == "public":
        table = dataset.load_public()
    elif data in dataset.public_sources():
        table = dataset.load_public([data])
    elif Path(data).suffix.lower() in (".csv", ".parquet", ".pq") or Path(data).exists():
        table = dataset.load_measurements(Path(data))
        table["source"] = table["source"].fillna(Path(data).stem)
    else:
        raise UserError(
            f"unknown data {data!r}; expected public, one of "
            f"{', '.join(dataset.public_sources())}, or a path to a .csv/.parquet file"
        )
    return table


def _filter(table: pd.DataFrame, column: str, wanted: list[str] | None, what: str) -> pd.DataFrame:
    if wanted is None:
        return table
    available = sorted(table[column].dropna().unique())
    unknown = [w for w in wanted if w not in available]
    if unknown:
        raise UserError(
            f"{what} {', '.join(map(repr, unknown))} not in the data; available: "
            f"{', '.join(available)}"
        )
    return table[table[column].isin(wanted)].reset_index(drop=True)


def run_benchmark(cfg: DictConfig, simulators: Sequence[Any] | None = None) -> BenchmarkResult:
    """Load the data, rank it with every simulator, baseline and peer, and score the rankings.

    Args:
        cfg: a composed ``conf/benchmark.yaml``.
        simulators: simulator objects to use instead of building ``cfg.simulators`` by name
            (a notebook or a test passes its own).
    """
    baselines = _names(cfg.baselines) or []
    unknown = [b for b in baselines if b not in BASELINES]
    if unknown:
        raise UserError(
            f"unknown baseline(s) {', '.join(unknown)}; allowed: {', '.join(BASELINES)}"
        )
    if simulators is None:
        names = _names(cfg.simulators) or []
        simulators = [simulator_from_conf(n, dataset.CONF_DIR) for n in names]
    table = load_data(str(cfg.data))
    table = _filter(table, "cluster", _names(cfg.hardware), "hardware")
    table = _filter(table, "source", _names(cfg.source), "source")
    specs = [dataset.row_to_specs(row) for row in table.to_dict("records")]
    labels = [layout.describe() for *_, layout in specs]
    log.info(
        "%d measured rows, %d scenarios", len(table), table.groupby(["source", "scenario"]).ngroups
    )
    rankings: list[Ranking] = []
    for simulator in simulators:
        start = time.perf_counter()
        rankings.append(simulate(simulator, specs))
        log.info(
            "%s: %d layouts in %.2f s", simulator.name, len(specs), time.perf_counter() - start
        )
    if "heuristic" in baselines:
        rule = HeuristicRule(**OmegaConf.to_container(cfg.heuristic))  # type: ignore[arg-type]
        rankings.append(heuristic_ranking(rule, specs))
    if cfg.peers:
        rankings.extend(peer_rankings(table))
    settings = ScoreSettings(
        oom_penalty_regret=float(cfg.oom_penalty_regret),
        top_k=int(cfg.top_k),
        bootstrap_samples=int(cfg.bootstrap_samples),
        seed=int(cfg.seed),
    )
    return score(table, labels, rankings, settings, with_random=RANDOM in baselines)


def _settings(cfg: DictConfig) -> dict[str, Any]:
    return {
        "simulators": ",".join(_names(cfg.simulators) or []),
        "baselines": ",".join(_names(cfg.baselines) or []),
        "data": cfg.data,
        "hardware": ",".join(_names(cfg.hardware) or ["all"]),
        "source": ",".join(_names(cfg.source) or ["all"]),
        "top_k": cfg.top_k,
        "oom_penalty_regret": cfg.oom_penalty_regret,
        "bootstrap_samples": cfg.bootstrap_samples,
        "seed": cfg.seed,
    }


def _notes(cfg: DictConfig) -> dict[str, str]:
    h = cfg.heuristic
    return {
        "scenario": "rows with the same `scenario` (and source) are alternatives for one job; "
        "regret needs at least two measured layouts, at least one of which ran",
        "regret@1": "measured time of the pick / best measured time - 1; layouts predicted "
        "not to fit rank last; a pick that really ran out of memory (status oom) is a "
        f"false-feasible pick, charged a regret of {cfg.oom_penalty_regret} "
        "(as costly as running the best layout once more)",
        f"regret@{cfg.top_k}": f"the best (lowest-regret) of the first {cfg.top_k} picks",
        "95% CI": f"bootstrap over scenarios ({cfg.bootstrap_samples} resamples, seed {cfg.seed})",
        "tau, rho": "Kendall tau-b and Spearman rho between predicted and measured times of the "
        "layouts that ran, per scenario; the table shows the median over scenarios",
        "MAPE": "mean |predicted - measured| / measured step time over every row that ran "
        "(single-layout scenarios included); mem MAPE likewise for measured peak memory",
        "false feasible / infeasible": "share of oom layouts predicted to fit / of layouts "
        "that ran predicted not to fit",
        "random": "the exact expected regret of a uniform draw among the measured layouts",
        "heuristic": "rule of thumb, no simulator: layouts whose weights, gradients and "
        f"optimizer states ({h.bytes_per_param} B/param, {h.optimizer_bytes_per_param} of them "
        "sharded by DP with the distributed optimizer, experts by EP) exceed "
        f"{h.state_memory_fraction:.0%} of device memory rank last; then TP inside a node, the "
        "least model parallelism tp*pp*cp, TP before PP before CP, the most EP, the smallest "
        "micro-batch, selective before no before full recompute",
        "peers": "another simulator's predictions carried in the data (`predictor`), scored "
        "on exactly its rows; a peer predicts no memory, so its feasibility is not scored",
    }


def _report(cfg: DictConfig, result: BenchmarkResult) -> None:
    settings = _settings(cfg)
    report_dir = Path(cfg.report_dir)
    write_report(result, report_dir, settings, _notes(cfg))
    if cfg.output == "json":
        print(json.dumps(json_payload(result, settings)))
    else:
        print(console_tables(result, int(cfg.top_k)))
        print(f"report: {report_dir}/benchmark.md")
    if cfg.tracking.enabled:
        from autotune._benchmark_tracking import log_benchmark_run

        run_id = log_benchmark_run(
            cfg.tracking.uri,
            cfg.tracking.experiment,
            settings,
            result.summaries,
            OmegaConf.to_yaml(cfg),
            report_dir,
        )
        log.info(
            "MLflow run %s (%s, experiment %s)", run_id, cfg.tracking.uri, cfg.tracking.experiment
        )


def run(cfg: DictConfig) -> None:
    """Run the benchmark of ``cfg`` and report it (console or JSON, files, MLflow)."""
    if cfg.output not in OUTPUTS:
        raise UserError(f"unknown output {cfg.output!r}; allowed: {', '.join(OUTPUTS)}")
    start = time.perf_counter()
    result = run_benchmark(cfg)
    _report(cfg, result)
    log.info("benchmark took %.1f s", time.perf_counter() - start)


register_benchmark_schema()


@hydra.main(version_base="1.3", config_path="../conf", config_name="benchmark")
@guarded
def main(cfg: DictConfig) -> None:
    """Run the benchmark; a user error prints ``error: ...`` and exits with status 2."""
    run(cfg)


if __name__ == "__main__":
    main()
