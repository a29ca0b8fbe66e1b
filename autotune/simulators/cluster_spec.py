"""The cluster a simulator prices: :class:`DeviceSpec` (one accelerator), :class:`LinkSpec`
(one fabric) and :class:`ClusterSpec` (nodes of devices joined by two fabrics)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autotune.simulators._checks import require_at_least
from autotune.simulators._checks import require_at_most
from autotune.simulators._checks import require_bools
from autotune.simulators._checks import require_choice
from autotune.simulators._checks import require_fraction
from autotune.simulators._checks import require_integers
from autotune.simulators._checks import require_name
from autotune.simulators._checks import require_non_negative
from autotune.simulators._checks import require_numbers
from autotune.simulators._checks import require_positive
from autotune.simulators.errors import SpecError
from autotune.simulators.limits import MAX_DEVICES
from autotune.simulators.limits import MAX_GBPS
from autotune.simulators.limits import MAX_LATENCY_US
from autotune.simulators.limits import MAX_MEMORY_GIB
from autotune.simulators.limits import MAX_SM_COUNT
from autotune.simulators.limits import MAX_TFLOPS
from autotune.simulators.limits import MIN_GBPS
from autotune.simulators.limits import MIN_MEMORY_GBPS
from autotune.simulators.limits import MIN_MEMORY_GIB
from autotune.simulators.limits import MIN_TFLOPS

__all__ = ["ClusterSpec", "DeviceSpec", "GEMM_TABLES", "LinkSpec", "TOPOLOGIES"]

# Measured tables of GEMM throughput by shape that a device may name
# (autotune.simulators.gemm_table).
GEMM_TABLES = ("xla_h100", "xla_b200")
TOPOLOGIES = ("switch", "full_mesh")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator: dense peak matrix throughput, achievable fraction, HBM."""

    name: str
    bf16_tflops: float
    fp16_tflops: float
    fp32_tflops: float
    memory_gib: float
    memory_gbps: float
    matmul_efficiency: float
    memory_efficiency: float
    # Whether fused (flash) attention kernels exist for this device (False on V100).
    supports_flash_attention: bool = True
    # Dense FP8 peak (0: no FP8 tensor cores), and how many FP8 copies of each FP8-GEMM weight
    # Transformer Engine caches (2 on Hopper: rowwise and transposed; 1 on Blackwell).
    fp8_tflops: float = 0.0
    fp8_weight_copies: int = 0
    # The fraction of the FP8 peak that FP8 GEMMs of the best shapes reach, where it differs
    # from matmul_efficiency (None: the same fraction as the device's other GEMMs).
    fp8_matmul_efficiency: float | None = None
    # Streaming multiprocessors, for the tile and wave quantization of GEMM shapes
    # (autotune.simulators.gemm_waves); None where matmul_efficiency already includes those losses
    # or the device's tiling is not modelled.
    sm_count: int | None = None
    # A measured table of GEMM throughput by shape (GEMM_TABLES), the other way to price
    # shapes; None: every shape at matmul_efficiency (or the waves of sm_count).
    gemm_table: str | None = None
    # What a training process cannot allocate before the framework's first tensor, in GiB: the
    # part of memory_gib the driver does not expose and the CUDA/CANN context.
    runtime_memory_gib: float = 0.0

    # size: one bounds check per field, each with its reason (simulators/limits.py)
    def __post_init__(self) -> None:
        owner = f"device {self.name!r}"
        require_name(owner, self.name)
        tflops = {
            "bf16_tflops": self.bf16_tflops,
            "fp16_tflops": self.fp16_tflops,
            "fp32_tflops": self.fp32_tflops,
            "fp8_tflops": self.fp8_tflops,
        }
        require_numbers(
            owner,
            **tflops,
            memory_gib=self.memory_gib,
            memory_gbps=self.memory_gbps,
            matmul_efficiency=self.matmul_efficiency,
            memory_efficiency=self.memory_efficiency,
        )
        require_integers(owner, fp8_weight_copies=self.fp8_weight_copies)
        require_bools(owner, supports_flash_attention=self.supports_flash_attention)
        if self.sm_count is not None:
            require_integers(owner, sm_count=self.sm_count)
            require_positive(owner, sm_count=self.sm_count)
            require_at_most(owner, MAX_SM_COUNT, "a B200 has 148", sm_count=self.sm_count)
        if self.gemm_table is not None:
            require_choice(owner, "gemm_table", self.gemm_table, GEMM_TABLES)
            if self.sm_count is not None:
                raise SpecError(f"{owner}: set sm_count or gemm_table, not both")
        require_positive(
            owner,
            fp16_tflops=self.fp16_tflops,
            fp32_tflops=self.fp32_tflops,
            memory_gib=self.memory_gib,
            memory_gbps=self.memory_gbps,
        )
        require_non_negative(
            owner,
            bf16_tflops=self.bf16_tflops,
            fp8_tflops=self.fp8_tflops,
            fp8_weight_copies=self.fp8_weight_copies,
        )
        require_at_most(owner, MAX_TFLOPS, "a B200 gives 4.5e3 in FP8", **tflops)
        require_at_least(
            owner,
            MIN_TFLOPS,
            "a V100 gives 15.7 in FP32; 0 where the device has none",
            **{k: v for k, v in tflops.items() if v != 0},
        )
        require_at_most(
            owner, MAX_MEMORY_GIB, "the largest HBM is 288 GB", memory_gib=self.memory_gib
        )
        require_at_least(owner, MIN_MEMORY_GIB, "a T4 has 16 GB", memory_gib=self.memory_gib)
        require_numbers(owner, runtime_memory_gib=self.runtime_memory_gib)
        require_non_negative(owner, runtime_memory_gib=self.runtime_memory_gib)
        if self.runtime_memory_gib >= self.memory_gib:
            raise SpecError(
                f"{owner}: runtime_memory_gib={self.runtime_memory_gib} leaves nothing of "
                f"memory_gib={self.memory_gib}; it must be below it"
            )
        require_at_most(owner, MAX_GBPS, "HBM3e gives 8e3", memory_gbps=self.memory_gbps)
        require_at_least(owner, MIN_MEMORY_GBPS, "a T4 gives 320", memory_gbps=self.memory_gbps)
        require_at_most(
            owner,
            2,
            "Transformer Engine keeps at most two",
            fp8_weight_copies=self.fp8_weight_copies,
        )
        require_fraction(
            owner,
            matmul_efficiency=self.matmul_efficiency,
            memory_efficiency=self.memory_efficiency,
        )
        if self.fp8_matmul_efficiency is not None:
            require_numbers(owner, fp8_matmul_efficiency=self.fp8_matmul_efficiency)
            require_fraction(owner, fp8_matmul_efficiency=self.fp8_matmul_efficiency)
            if not self.fp8_tflops:
                raise SpecError(
                    f"{owner}: fp8_matmul_efficiency is set but the device has no FP8 tensor "
                    "cores (fp8_tflops=0); set fp8_tflops or leave fp8_matmul_efficiency unset"
                )

    def gemm_efficiency(self, dtype: str) -> float:
        """The fraction of ``dtype``'s peak that GEMMs of the best shapes reach."""
        if dtype == "fp8" and self.fp8_matmul_efficiency is not None:
            return self.fp8_matmul_efficiency
        return self.matmul_efficiency

    @property
    def achieved_memory_bytes_per_s(self) -> float:
        """HBM bandwidth that memory-bound kernels reach (bytes/s)."""
        return self.memory_gbps * 1e9 * self.memory_efficiency

    def runs_as(self, dtype: str) -> str:
        """The dtype a step asking for ``dtype`` runs in here: fp16 for bf16 on a device
        without bf16 (V100, Ascend 910: ``bf16_tflops`` 0), else ``dtype``. The simulators
        price that dtype's peak (:meth:`peak_flops`) and the launch files run it."""
        return "fp16" if dtype == "bf16" and not self.bf16_tflops else dtype

    def peak_flops(self, dtype: str) -> float:
        """Dense peak matrix FLOP/s of GEMMs in ``dtype``, as the device runs it
        (:meth:`runs_as`: V100 has no bf16, its fp16).

        Raises:
            SpecError: ``fp8`` on a device without FP8 tensor cores.
        """
        if dtype == "fp8":
            if not self.fp8_tflops:
                raise SpecError(f"device {self.name!r} has no FP8 tensor cores (fp8_tflops=0)")
            return self.fp8_tflops * 1e12
        tflops = {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops, "fp32": self.fp32_tflops}
        return tflops[self.runs_as(dtype)] * 1e12


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One level of the network, per device and per direction.

    ``bandwidth_gbps`` is what one device can send at once on this level (GB/s, one
    direction). On a ``full_mesh`` (Ascend HCCS) each peer has its own link of
    ``peer_link_gbps``, so a group of n devices in the node uses only n-1 links;
    ``mesh_size`` devices form one mesh (4 on the older Ascend 910 node, whose two meshes talk
    through ``cross_mesh_gbps`` of PCIe). ``efficiency`` is the achievable fraction (busbw /
    link bandwidth) of the collective library; ``latency_us`` is the fixed cost of one
    collective call on this level (launch and synchronisation); ``step_latency_us`` what each
    further member of the group adds to it (the slope of a measured latency curve: NCCL's rings
    take n - 1 steps per pass), 0 where no curve was measured. ``whole_node_gbps`` (between
    nodes) is the measured bus bandwidth of a collective whose communicator holds every
    device of its nodes, where the collective library cannot spread it over the node's NICs;
    0: every member adds its own ``bandwidth_gbps x efficiency`` (groups with fewer members
    per node always do).
    """

    bandwidth_gbps: float
    latency_us: float
    efficiency: float
    step_latency_us: float = 0.0
    whole_node_gbps: float = 0.0
    topology: str = "switch"
    peer_link_gbps: float = 0.0
    mesh_size: int = 0
    cross_mesh_gbps: float = 0.0

    def __post_init__(self) -> None:
        rates = {
            "bandwidth_gbps": self.bandwidth_gbps,
            "peer_link_gbps": self.peer_link_gbps,
            "cross_mesh_gbps": self.cross_mesh_gbps,
            "whole_node_gbps": self.whole_node_gbps,
        }
        latencies = {"latency_us": self.latency_us, "step_latency_us": self.step_latency_us}
        require_numbers("link", **rates, **latencies, efficiency=self.efficiency)
        require_integers("link", mesh_size=self.mesh_size)
        require_positive("link", bandwidth_gbps=self.bandwidth_gbps)
        require_non_negative(
            "link",
            **latencies,
            peer_link_gbps=self.peer_link_gbps,
            mesh_size=self.mesh_size,
            cross_mesh_gbps=self.cross_mesh_gbps,
            whole_node_gbps=self.whole_node_gbps,
        )
        require_at_most("link", MAX_GBPS, "NVLink 5 gives 900", **rates)
        require_at_least(
            "link",
            MIN_GBPS,
            "1 Gbit Ethernet gives 0.125; 0 where unused",
            **{k: v for k, v in rates.items() if v != 0 or k == "bandwidth_gbps"},
        )
        require_at_most("link", MAX_LATENCY_US, "10 s per call", **latencies)
        require_at_most("link", MAX_DEVICES, "the largest clusters", mesh_size=self.mesh_size)
        require_fraction("link", efficiency=self.efficiency)
        require_choice("link", "topology", self.topology, TOPOLOGIES)
        if self.topology == "full_mesh":
            require_positive("full-mesh link", peer_link_gbps=self.peer_link_gbps)

    def group_bandwidth_gbps(self, members: int) -> float:
        """Achievable per-device bandwidth (GB/s) when ``members`` devices of a node talk.

        A switch gives every device its full bandwidth; a full mesh gives a group of n only
        its n-1 direct links (docs/reference.md 1.5: model TP=2 or 4 on 910B with (n-1)*28 GB/s).
        """
        if self.topology == "switch" or members <= 1:
            return self.bandwidth_gbps * self.efficiency
        mesh = self.mesh_size or members
        peers = min(members, mesh) - 1
        bandwidth = min(peers * self.peer_link_gbps, self.bandwidth_gbps)
        if members > mesh and self.cross_mesh_gbps:
            bandwidth = min(bandwidth, self.cross_mesh_gbps * members / (members - mesh))
        return bandwidth * self.efficiency


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterSpec:
    """Nodes of identical devices: an intra-node link level and an inter-node one."""

    name: str
    device: DeviceSpec
    devices_per_node: int
    num_nodes: int
    intra_node: LinkSpec
    inter_node: LinkSpec
    # The framework a job on this cluster runs unless train.framework names another
    # (a name of conf/framework/: mindspeed on Ascend, megatron_core on NVIDIA GPUs).
    default_framework: str = "megatron_core"
    # The measured sources (autotune/dataset/) whose rows on this cluster some of its constants
    # were fit on; the benchmark scores those rows apart as in-sample (which constants and how:
    # docs/decisions/0033-h100-gemm-level-fitted.md).
    fitted_on: tuple[str, ...] = ()
    # Device memory the collective library (NCCL, HCCL) keeps per communicator a rank runs
    # collectives or sends on, in GiB.
    communicator_buffer_gib: float = 0.0
    # Devices of one host (one operating system, one torchrun), where a "node" is a larger
    # NVLink domain: a GB200 NVL72 rack is 18 hosts of 4 GPUs. None: a host is a node.
    devices_per_host: int | None = None

    def __post_init__(self) -> None:
        owner = f"cluster {self.name!r}"
        require_name(owner, self.name)
        if isinstance(self.fitted_on, str) or not isinstance(self.fitted_on, Sequence):
            raise SpecError(f"{owner}: fitted_on={self.fitted_on!r} must be a list of sources")
        for source in self.fitted_on:
            require_name(f"{owner} fitted_on", source)
        object.__setattr__(self, "fitted_on", tuple(self.fitted_on))  # a list from a config
        sizes = {"devices_per_node": self.devices_per_node, "num_nodes": self.num_nodes}
        require_integers(owner, **sizes)
        require_positive(owner, **sizes)
        require_numbers(owner, communicator_buffer_gib=self.communicator_buffer_gib)
        require_non_negative(owner, communicator_buffer_gib=self.communicator_buffer_gib)
        if self.devices_per_host is not None:
            require_integers(owner, devices_per_host=self.devices_per_host)
            require_positive(owner, devices_per_host=self.devices_per_host)
            if self.devices_per_node % self.devices_per_host:
                raise SpecError(
                    f"{owner}: devices_per_host={self.devices_per_host} does not divide "
                    f"devices_per_node={self.devices_per_node}; a node is whole hosts"
                )
        require_at_most(
            owner,
            self.device.memory_gib,
            "the device's memory",
            communicator_buffer_gib=self.communicator_buffer_gib,
        )
        if self.num_devices > MAX_DEVICES:
            raise SpecError(
                f"{owner}: num_nodes={self.num_nodes} x devices_per_node="
                f"{self.devices_per_node} = {self.num_devices:,} devices; at most "
                f"{MAX_DEVICES:,} (the largest clusters have ~2e5)"
            )

    @property
    def num_devices(self) -> int:
        return self.devices_per_node * self.num_nodes

    @property
    def processes_per_host(self) -> int:
        """Training processes one launcher starts on a host: one per device of the host."""
        return self.devices_per_host or self.devices_per_node

    @property
    def num_hosts(self) -> int:
        return self.num_devices // self.processes_per_host
