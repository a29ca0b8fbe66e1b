"""What a simulator's step time misses, as a model whose uncertainty the probe loop carries.

The residual of a layout is ``r = log(measured step time / predicted step time)``. Within one
job it is modelled as a sum of Gaussian parts:

    r = mean + job + sum over layout fields f of part_f[value of f]
          + sum over degrees g of slope_g * log2(value of g)
          + sum over constants c of given_c * share_c + own

- ``mean``: what the simulator misses on every job (a fixed number);
- ``job``: what it misses on this job, shared by every layout of it (sd ``level``);
- ``part_f[v]``: what it misses on the layouts of this job whose field ``f`` (tp, pp, dp, the
  micro-batch, the recompute mode, ...) has the value ``v``, shared by exactly those layouts
  (sd ``widths[f]``): the collectives of one TP group size, the bubble and sends of one
  pipeline depth, the GEMM shapes of one micro-batch;
- ``slope_g``: what it misses per doubling of a degree ``g`` (:data:`SLOPE_FIELDS`: TP, PP, CP,
  EP, VPP, the micro-batch), the same for every layout of the job (sd ``slopes[g]``): a cost
  the simulator prices too low that grows with the degree (the host's pace at a higher TP
  degree, the sends of a deeper pipeline) shows as a trend over the degree's values, which
  probes at two values measure and carry to the values not probed. A degree of 1 runs nothing
  of what the degree adds, so the trend is anchored there (log2 1 = 0). DP has no slope: in a
  job of one world size its degree follows from the others', and a slope of it would stand in
  for the job's part;
- ``given_c``: what the simulator misses of one of its constants (the host's cost per operator
  call, the share of the links between nodes a collective gets), times ``share_c``, the share
  of the layout's step that constant sets (:mod:`autotune.calibrate._shares`; for the host: 0
  for a layout whose kernels outlast the host's calls, 1 for one whose step is all host
  calls). A probe of a host-paced layout slower than predicted then says little of a layout
  the device paces, and a probe of each tells the two apart. The sds ``given`` are not
  estimated: the shipped layouts that the host paces are all one source's (vTrain's single
  node), and a source's own rows never estimate what the benchmark gives it; each is the
  prior width of the calibration factor that scales the constant (``calibrate.prior``);
- ``own``: what belongs to one layout alone, measurement noise included (sd ``own``).

Two layouts of a job thus have correlated residuals, the more so the more field values they
share and the nearer their degrees. Conditioning on the measured layouts of a job
(:func:`belief`) is Gaussian algebra: one probe moves the job's level, the parts of its own
field values and the slopes, so a layout that shares its TP degree with a probe slower than
predicted is expected slower too, a layout of a higher TP degree a little more so, and a
layout that shares nothing with the probes keeps most of its uncertainty. The priors give way
as the probes add up.

**Jobs differ in how far off the simulator is.** All the parts of one job are scaled by a
factor of the job's own, ``tau``: ``1 / tau**2`` is Gamma-distributed with ``dof / 2`` as
both shape and rate, so a job's residuals follow a multivariate Student t with ``dof``
degrees of freedom (a scale mixture of Gaussians). After ``n`` probes whose residuals lie
``q`` (their Mahalanobis distance squared) from what the model expects, every unmeasured
layout's Gaussian conditional variance is multiplied by ``(dof + q) / (dof + n - 2)``, the
variance of its Student t: probes that miss by more than the model expects widen every
unmeasured layout's uncertainty, probes that agree narrow it. A Gaussian model,
whose uncertainty after the probes does not depend on what they measured, stays as sure of a
job the simulator gets badly wrong as of one it gets right.

The other sds, the mean and ``dof`` are not set by hand: :func:`estimate` takes them by
maximum marginal likelihood (empirical Bayes) over the residuals of measured jobs (the shipped
rows, or, in the benchmark, every other source's rows), each source weighing the same, beside
the given parts.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from autotune.calibrate._shares import SHARE_FACTORS
from autotune.simulators import Layout
from autotune.simulators.layout import LAYOUT_FIELDS

__all__ = [
    "SLOPE_FIELDS",
    "Belief",
    "LayoutFeatures",
    "ResidualModel",
    "belief",
    "estimate",
    "layout_features",
    "log_density",
]

# the degrees whose residual may trend with log2 of the value (module docstring)
SLOPE_FIELDS: tuple[str, ...] = ("tp", "pp", "cp", "ep", "vpp", "micro_batch")

_SD_BOUNDS = (1e-3, 1.0)  # an sd of a log residual: 0.1 % to e (beyond: no evidence of it)
# the degrees of freedom of the job's scale: above 2, for a finite variance (the belief is
# carried as a mean and a variance); 1e3 is as good as Gaussian
_DOF_BOUNDS = (2.01, 1e3)
_MEAN_BOUND = 1.0  # the mean log residual within [-1, 1] (predictions off by at most e)
_START_SD = 0.05  # where the search for the sds starts
_SHOWN = 3  # fields named in the model's one-line text (the largest parts)
_GIVEN_TEXT = {  # a given part in the model's one-line text
    "host_overhead": "at a step the host paces",
    "inter_node_efficiency": "at a step spent waiting between nodes",
}


class _Batch(NamedTuple):
    """Jobs with the same number of layouts ``n``: residuals (jobs, n), the kernel of every
    estimated part (jobs, parts, n, n), the covariance of the given parts (jobs, n, n), and
    each job's weight (jobs,)."""

    residuals: np.ndarray
    kernels: np.ndarray
    fixed: np.ndarray
    weight: np.ndarray


@dataclass(frozen=True, slots=True)
class LayoutFeatures:
    """What the residual model reads of each layout (one row per layout): an integer code per
    field of ``fields``, the same for layouts with the same value (comparable within one
    :func:`layout_features` call only), log2 of each degree of ``slope_fields``, and the share
    of its step each constant of ``share_factors`` sets
    (:func:`autotune.calibrate._shares.step_shares`)."""

    codes: np.ndarray
    logs: np.ndarray
    shares: np.ndarray
    fields: tuple[str, ...] = LAYOUT_FIELDS
    slope_fields: tuple[str, ...] = SLOPE_FIELDS
    share_factors: tuple[str, ...] = SHARE_FACTORS

    def __len__(self) -> int:
        return len(self.codes)

    def take(self, index: np.ndarray | Sequence[int]) -> LayoutFeatures:
        """The features of the layouts at ``index`` (positions or a boolean mask)."""
        at = np.asarray(index)
        return LayoutFeatures(
            self.codes[at],
            self.logs[at],
            self.shares[at],
            self.fields,
            self.slope_fields,
            self.share_factors,
        )

    def kernels(self) -> np.ndarray:
        """Per field, then per degree, an (n, n) matrix: 1 where two layouts share the
        field's value; the product of their log2 degrees."""
        same = self.codes.T[:, :, None] == self.codes.T[:, None, :]
        return np.concatenate([same, self.logs.T[:, :, None] * self.logs.T[:, None, :]])

    def given_covariance(self, sds: np.ndarray, other: LayoutFeatures | None = None) -> np.ndarray:
        """The covariance of the given parts of sds ``sds`` (one per share factor) between
        these layouts and ``other`` (None: these)."""
        other = self if other is None else other
        return np.asarray((self.shares * np.square(sds)) @ other.shares.T)

    @classmethod
    def none(cls, n: int) -> LayoutFeatures:
        """No field at all: a model of the job's part and each layout's own part alone."""
        return cls(
            np.zeros((n, 0), dtype=np.int64), np.zeros((n, 0)), np.zeros((n, 0)), (), (), ()
        )


def layout_features(layouts: Sequence[Layout], shares: np.ndarray | None = None) -> LayoutFeatures:
    """The :class:`LayoutFeatures` of ``layouts``: every layout field, the slopes', and the
    share of each :data:`SHARE_FACTORS` constant in each layout's step (None: 0 of every
    one)."""
    codes = np.zeros((len(layouts), len(LAYOUT_FIELDS)), dtype=np.int64)
    for f, name in enumerate(LAYOUT_FIELDS):
        seen: dict[Hashable, int] = {}
        for i, layout in enumerate(layouts):
            codes[i, f] = seen.setdefault(getattr(layout, name), len(seen))
    logs = np.log2([[float(getattr(lay, name)) for name in SLOPE_FIELDS] for lay in layouts])
    if shares is None:
        shares = np.zeros((len(layouts), len(SHARE_FACTORS)))
    return LayoutFeatures(codes, logs.reshape(len(layouts), len(SLOPE_FIELDS)), shares)


@dataclass(frozen=True, slots=True)
class ResidualModel:
    """The prior of a job's step-time residuals (log measured / predicted): module docstring.

    ``widths`` holds the sd of the part of each layout field, in :data:`LAYOUT_FIELDS` order,
    ``slopes`` the sd of the slope of each degree of :data:`SLOPE_FIELDS` (per doubling),
    ``given`` the sd of the part of each :data:`SHARE_FACTORS` constant (given, not
    estimated); the sds are those of a job whose scale ``tau`` is 1, and ``dof`` says how the
    scale varies between jobs (infinite: not at all, a Gaussian model); ``scenarios`` and
    ``sources`` count the measured jobs it was estimated on.
    """

    mean: float
    level: float
    own: float
    widths: tuple[tuple[str, float], ...]
    slopes: tuple[tuple[str, float], ...] = ()
    given: tuple[tuple[str, float], ...] = ()
    dof: float = math.inf
    scenarios: int = 0
    sources: int = 0

    def covariance(self, a: LayoutFeatures, b: LayoutFeatures) -> np.ndarray:
        """Prior covariance of the residuals of layouts ``a`` and ``b`` of one job, at the job's
        scale 1, without the ``own`` part (add it on the diagonal of a layout with itself)."""
        cov = np.full((len(a), len(b)), self.level**2)
        for f, (_, width) in enumerate(self.widths):
            cov += width**2 * (a.codes[:, f, None] == b.codes[None, :, f])
        for g, (_, slope) in enumerate(self.slopes):
            cov += slope**2 * a.logs[:, g, None] * b.logs[None, :, g]
        return cov + a.given_covariance(self._given_sds(a), b)

    def _given_sds(self, x: LayoutFeatures) -> np.ndarray:
        """The sd of the given part of each of ``x``'s share factors (0: not given)."""
        sds = dict(self.given)
        return np.array([sds.get(name, 0.0) for name in x.share_factors])

    def variance(self, x: LayoutFeatures) -> np.ndarray:
        """The prior variance of each layout's residual at the job's scale 1, ``own``
        included: the slopes add the more, the higher its degrees, a given part the more, the
        more of its step the constant sets."""
        flat = self.level**2 + self.own**2 + sum(w**2 for _, w in self.widths)
        var = np.full(len(x), flat) + np.square(x.shares) @ np.square(self._given_sds(x))
        for g, (_, slope) in enumerate(self.slopes):
            var += slope**2 * x.logs[:, g] ** 2
        return var

    @property
    def sd(self) -> float:
        """The prior sd of the residual of a layout whose degrees are all 1 (every part but the
        slopes, at the job's scale 1)."""
        return math.sqrt(self.level**2 + self.own**2 + sum(w**2 for _, w in self.widths))

    def scale(self, q: float, n: int) -> float:
        """What multiplies the variances of a job whose ``n`` measured residuals lie ``q``
        (Mahalanobis distance squared) from the model: the variance of the job's Student t
        after them, ``(dof + q) / (dof + n - 2)`` (module docstring); 1 for a Gaussian model."""
        if math.isinf(self.dof):
            return 1.0
        return (self.dof + q) / (self.dof + n - 2)

    @property
    def heavy(self) -> bool:
        """Whether the jobs' scales vary (a Student t, not a Gaussian)."""
        return not math.isinf(self.dof)

    def text(self) -> str:
        """The model in one line: the sds that matter before any probe, in percent of the
        step time."""
        prior = math.sqrt(self.scale(0.0, 0))  # the t's sd over its scale's
        largest = sorted(self.widths, key=lambda item: -item[1])[:_SHOWN]
        parts = [f"{name} {100 * prior * w:.1f}%" for name, w in largest]
        steepest = sorted(self.slopes, key=lambda item: -item[1])[:_SHOWN]
        trends = [f"{name} {100 * prior * w:.1f}%" for name, w in steepest]
        tails = f"; a Student t with {self.dof:.1f} degrees of freedom" if self.heavy else ""
        return (
            f"measured / predicted x{math.exp(self.mean):.3f} on average, sd "
            f"{100 * prior * self.sd:.1f}% at degree 1: {100 * prior * self.own:.1f}% a layout's "
            f"own, {100 * prior * self.level:.1f}% the job's"
            + (f", per value of {', '.join(parts)}" if parts else "")
            + (f", per doubling of {', '.join(trends)}" if trends else "")
            + "".join(
                f", {100 * prior * sd:.1f}% {_GIVEN_TEXT.get(name, f'per share of {name}')}"
                for name, sd in self.given
            )
            + tails
            + f" (estimated on {self.scenarios} measured jobs of {self.sources} sources)"
        )


@dataclass(frozen=True, slots=True)
class Belief:
    """Per layout: the mean and variance of its log step time given the measured ones (a
    measured layout: its log measured time, variance 0), and the job's scale that multiplied
    the variances (:meth:`ResidualModel.scale`)."""

    mean: np.ndarray
    var: np.ndarray
    scale: float = 1.0

    @property
    def expected_s(self) -> np.ndarray:
        """The expected step time (the mean of the log-normal)."""
        return np.asarray(np.exp(self.mean + self.var / 2))


def belief(
    model: ResidualModel,
    log_predicted: np.ndarray,
    features: LayoutFeatures,
    measured: Mapping[int, float],
) -> Belief:
    """The log step time of every layout given the measured step times (position -> seconds).

    Gaussian conditioning on the measured residuals: mean ``m + S_xa S_aa^-1 (r_a - m)``,
    variance ``S_xx - S_xa S_aa^-1 S_ax``, times the job's scale after them
    (:meth:`ResidualModel.scale`, with ``q = (r_a - m) S_aa^-1 (r_a - m)``): the mean and
    variance of the Student t the job's residuals follow.
    """
    mean = log_predicted + model.mean
    var = model.variance(features)
    scale = model.scale(0.0, 0)
    if measured:
        known = np.array(sorted(measured), dtype=int)
        probes = features.take(known)
        r = np.log([measured[int(i)] for i in known]) - log_predicted[known] - model.mean
        s_aa = model.covariance(probes, probes) + model.own**2 * np.eye(len(known))
        s_xa = model.covariance(features, probes)
        s_xa[known, np.arange(len(known))] += model.own**2
        solved = np.linalg.solve(s_aa, np.column_stack([r, s_xa.T]))
        mean = mean + s_xa @ solved[:, 0]
        var = np.maximum(var - np.einsum("ij,ji->i", s_xa, solved[:, 1:]), 0.0)
        mean[known] = np.log([measured[int(i)] for i in known])
        var[known] = 0.0
        scale = model.scale(float(r @ solved[:, 0]), len(known))
    return Belief(mean=mean, var=var * scale, scale=scale)


def log_density(model: ResidualModel, residuals: np.ndarray, features: LayoutFeatures) -> float:
    """The model's log density of one job's residuals (log measured / predicted of each of its
    layouts, ``features`` theirs): a multivariate Student t with ``dof`` degrees of freedom,
    or a Gaussian for a Gaussian model (what a held-out job scores)."""
    from scipy import stats

    shape = model.covariance(features, features) + model.own**2 * np.eye(len(features))
    mean = np.full(len(features), model.mean)
    if not model.heavy:
        return float(stats.multivariate_normal.logpdf(residuals, mean, shape))
    return float(stats.multivariate_t.logpdf(residuals, mean, shape, df=model.dof))


# size: the marginal likelihood and its gradient, over jobs batched by their number of layouts
def _negative_log_likelihood(
    theta: np.ndarray, batches: Sequence[_Batch]
) -> tuple[float, np.ndarray]:
    """Weighted negative log marginal likelihood of the jobs' residuals, and its gradient in
    ``theta`` = (mean, log level, log own, log sd of each part: fields, then slopes)."""
    mean, log_level, log_own = theta[:3]
    widths2 = np.exp(2 * theta[3:])
    total = 0.0
    grad = np.zeros_like(theta)
    for r, kernels, fixed, weight in batches:  # r: (jobs, n); kernels: (jobs, parts, n, n)
        n = r.shape[1]
        cov = (
            fixed
            + np.exp(2 * log_level)
            + np.einsum("f,bfij->bij", widths2, kernels)
            + np.exp(2 * log_own) * np.eye(n)
        )
        inverse = np.linalg.inv(cov)
        _, logdet = np.linalg.slogdet(cov)
        d = r - mean
        alpha = np.einsum("bij,bj->bi", inverse, d)
        total += float(np.sum(weight * 0.5 * (np.sum(d * alpha, axis=1) + logdet)))
        q = 0.5 * weight[:, None, None] * (inverse - alpha[:, :, None] * alpha[:, None, :])
        grad[0] -= float(np.sum(weight * alpha.sum(axis=1)))
        grad[1] += float(q.sum()) * 2 * np.exp(2 * log_level)
        grad[2] += float(np.trace(q, axis1=1, axis2=2).sum()) * 2 * np.exp(2 * log_own)
        grad[3:] += np.einsum("bij,bfij->f", q, kernels) * 2 * widths2
    return total, grad


def estimate(
    residuals: np.ndarray,
    jobs: Sequence[Hashable],
    sources: Sequence[str],
    features: LayoutFeatures,
    scales: bool = True,
    given: Mapping[str, float] | None = None,
) -> ResidualModel:
    """The model's sds and mean by maximum marginal likelihood over measured jobs, then how
    the jobs' scales vary (:func:`_job_scales`).

    Args:
        residuals: log(measured / predicted) of each measured layout that ran.
        jobs: the job (scenario) of each; the layouts of one job share its parts.
        sources: the source of each; every source weighs the same in the likelihood (a
            source's jobs share its weight), as in the benchmark's "across sources".
        features: :func:`layout_features` of the layouts (codes compared within a job only;
            :meth:`LayoutFeatures.none`: a model of the job's part and each layout's own part
            alone).
        scales: whether to estimate how the jobs' scales vary (False: a Gaussian model,
            every job at scale 1).
        given: the sd of the part of each share factor of ``features`` (module docstring;
            missing: 0), given; the others are estimated beside them.
    """
    from scipy.optimize import minimize  # imported on first use (about half a second)

    given = {name: float((given or {}).get(name, 0.0)) for name in features.share_factors}
    sds_given = np.array(list(given.values()))
    batches = _batches(residuals, jobs, sources, features, sds_given)
    fields = features.fields
    parts = 2 + len(fields) + len(features.slope_fields)
    low, high = (math.log(b) for b in _SD_BOUNDS)
    start = np.r_[float(np.mean(residuals)), np.full(parts, math.log(_START_SD))]
    bounds = [(-_MEAN_BOUND, _MEAN_BOUND)] + [(low, high)] * parts
    solution = minimize(
        _negative_log_likelihood, start, (batches,), "L-BFGS-B", jac=True, bounds=bounds
    )
    theta = solution.x
    dof, spread = _job_scales(theta, batches) if scales else (math.inf, 1.0)
    # the t's factor c scales the Gaussian fit's whole covariance, the given parts with it
    sds = np.exp(theta[1:]) * math.sqrt(spread)
    return ResidualModel(
        mean=float(theta[0]),
        level=float(sds[0]),
        own=float(sds[1]),
        widths=tuple(zip(fields, map(float, sds[2 : 2 + len(fields)]), strict=True)),
        slopes=tuple(zip(features.slope_fields, map(float, sds[2 + len(fields) :]), strict=True)),
        given=tuple((name, sd * math.sqrt(spread)) for name, sd in given.items() if sd > 0),
        dof=dof,
        scenarios=len(set(jobs)),
        sources=len(set(sources)),
    )


def _job_scales(theta: np.ndarray, batches: Sequence[_Batch]) -> tuple[float, float]:
    """How the jobs' scales vary: the degrees of freedom ``dof`` of the Student t and the factor
    ``c`` of the Gaussian fit's covariance, by maximum likelihood of the t over the jobs (each
    source weighing the same), the shape of the covariance kept from the Gaussian fit. Only a
    job's Mahalanobis distance ``q`` under that fit and its number of layouts ``n`` matter:

        log p = lgamma((dof + n) / 2) - lgamma(dof / 2) - n / 2 log(dof c)
                - (dof + n) / 2 log(1 + q / (dof c)) + (what does not depend on dof, c)
    """
    from scipy.optimize import minimize
    from scipy.special import gammaln

    q, n, weight = _distances(theta, batches)

    def negative_log_likelihood(x: np.ndarray) -> float:
        dof, c = float(np.exp(x[0])), float(np.exp(x[1]))
        log_p = (
            gammaln((dof + n) / 2)
            - gammaln(dof / 2)
            - n / 2 * np.log(dof * c)
            - (dof + n) / 2 * np.log1p(q / (dof * c))
        )
        return -float(np.sum(weight * log_p))

    bounds = [tuple(math.log(b) for b in _DOF_BOUNDS), (math.log(1e-2), math.log(1e2))]
    found = minimize(
        negative_log_likelihood, [math.log(4.0), 0.0], method="L-BFGS-B", bounds=bounds
    )
    return float(np.exp(found.x[0])), float(np.exp(found.x[1]))


def _distances(
    theta: np.ndarray, batches: Sequence[_Batch]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per job: the Mahalanobis distance squared of its residuals under the Gaussian model
    ``theta``, its number of layouts and its weight."""
    mean, log_level, log_own = theta[:3]
    widths2 = np.exp(2 * theta[3:])
    q, n, weight = [], [], []
    for r, kernels, fixed, w in batches:
        size = r.shape[1]
        cov = (
            fixed
            + np.exp(2 * log_level)
            + np.einsum("f,bfij->bij", widths2, kernels)
            + np.exp(2 * log_own) * np.eye(size)
        )
        d = r - mean
        q.append(np.einsum("bi,bi->b", d, np.linalg.solve(cov, d[:, :, None])[:, :, 0]))
        n.append(np.full(len(r), size))
        weight.append(w)
    return np.concatenate(q), np.concatenate(n), np.concatenate(weight)


def _batches(
    residuals: np.ndarray,
    jobs: Sequence[Hashable],
    sources: Sequence[str],
    features: LayoutFeatures,
    given: np.ndarray,
) -> list[_Batch]:
    """The jobs batched by their number of layouts: residuals, the kernel of every estimated
    part (:meth:`LayoutFeatures.kernels`), the covariance of the given parts (sds ``given``)
    and each job's weight (every source weighing the same)."""
    groups: dict[Hashable, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job, []).append(i)
    per_source: dict[str, int] = {}
    for members in groups.values():
        per_source[sources[members[0]]] = per_source.get(sources[members[0]], 0) + 1
    by_size: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray, float]]] = {}
    for members in groups.values():
        index = np.array(members)
        mine = features.take(index)
        kernels = mine.kernels().astype(float)  # (parts, n, n)
        weight = len(groups) / len(per_source) / per_source[sources[members[0]]]
        job = (residuals[index], kernels, mine.given_covariance(given), weight)
        by_size.setdefault(len(members), []).append(job)
    return [
        _Batch(
            residuals=np.stack([g[0] for g in group]),
            kernels=np.stack([g[1] for g in group]),
            fixed=np.stack([g[2] for g in group]),
            weight=np.array([g[3] for g in group]),
        )
        for group in by_size.values()
    ]
