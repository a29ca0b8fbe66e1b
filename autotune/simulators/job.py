"""The training job every simulator prices: a model, the cluster it runs on, its training step.

A layout is priced against one :class:`Job` (``Simulator.simulate(job, layout)``) and checked
against it (``Layout.violations(job)``); a job and a layout together name one run.
"""

from __future__ import annotations

from dataclasses import dataclass

from autotune.simulators.specs import ClusterSpec
from autotune.simulators.specs import ModelSpec
from autotune.simulators.specs import TrainSpec

__all__ = ["Job"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A training job: what is trained, where, and how each step runs.

    Its properties are what the three specs give only together.

    Example:
        >>> from autotune import catalog
        >>> job = catalog.load_job("llama70b", "h100")
        >>> job.model.name, job.cluster.num_devices, job.flash_attention
        ('Llama-3.1-70B', 64, True)
    """

    model: ModelSpec
    cluster: ClusterSpec
    train: TrainSpec

    @property
    def flash_attention(self) -> bool:
        """Fused attention: the step asks for it, and the framework and the device have the
        kernels (``TrainSpec.uses_flash_attention``)."""
        return self.train.uses_flash_attention(self.cluster)

    @property
    def dtype(self) -> str:
        """The dtype the step runs in, and the framework is told: ``bf16``, ``fp16`` or ``fp32``.

        FP8 trains in bf16 with FP8 linear GEMMs (``TrainSpec.compute_dtype``); a device
        without bf16 (V100) runs bf16 jobs in fp16, the dtype the simulators price
        (``DeviceSpec.runs_as``).
        """
        return self.cluster.device.runs_as(self.train.compute_dtype)

    @property
    def peak_flops(self) -> float:
        """FLOP/s of one device at the step's precision (FP8: the FP8 peak)."""
        return self.cluster.device.peak_flops(self.train.precision)

    @property
    def model_flops_per_step(self) -> float:
        """The model's FLOPs of one step, forward and backward, without recompute."""
        return self.model.flops_per_token(self.train.seq_len) * self.train.tokens_per_step
