"""Record ATen operators and collectives of a meta-device forward and backward.

:class:`Recorder` is a ``TorchDispatchMode``: every ATen call is priced by shape (FLOPs from
``torch.utils.flop_counter``'s registered formulas, bytes from the tensors it reads and writes)
and appended as an :class:`~autotune.simulators.hierarchical.graph.Op`. What the meta device
cannot run (collectives, fused attention kernels) is recorded by the stand-ins of
:mod:`.kernels`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import bmm_flop
from torch.utils.flop_counter import flop_registry

from autotune.simulators.hierarchical.graph import COMM_CATEGORY
from autotune.simulators.hierarchical.graph import Op

__all__ = ["HostCounter", "Recorder", "autograd_nodes"]

_aten = torch.ops.aten
_ATTENTION = {
    _aten._scaled_dot_product_efficient_attention,
    _aten._scaled_dot_product_efficient_attention_backward,
}
_MATMUL = {_aten.mm, _aten.addmm, _aten.bmm, _aten.baddbmm, _aten.matmul, _aten.linear}
_BATCHED_MATMUL = {_aten.bmm, _aten.baddbmm}
# Allocations and metadata: no kernel runs for them.
_FREE = {
    _aten.empty,
    _aten.empty_like,
    _aten.empty_strided,
    _aten.new_empty,
    _aten.new_empty_strided,
    _aten.detach,
    _aten.lift_fresh,
    _aten._unsafe_view,
}
# Python-level calls that never reach the dispatcher: tensor metadata, attribute access and
# grad-mode switches (what the host counter skips).
_METADATA = {
    "__get__",
    "__set__",
    "size",
    "dim",
    "numel",
    "element_size",
    "stride",
    "is_contiguous",
    "is_floating_point",
    "untyped_storage",
    "requires_grad_",
    "_set_grad_enabled",
    "backward",
}
_ACTIVE: list[Recorder] = []


class Recorder(TorchDispatchMode):
    """Collect the operators of everything run inside ``with recorder:``.

    ``region`` tags forward ops by part of the layer (``core`` marks core attention, which
    selective recompute repeats); ``scope`` the other recomputed modules they run inside
    (:meth:`checkpointed`); ``paused()`` hides layout shuffles that a fused kernel would not
    perform. Saved activations are tracked through :meth:`saving`.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[Op] = []
        self.region = ""
        self.paused_depth = 0
        self.saved: dict[int, tuple[float, set[str]]] = {}
        self.excluded: set[int] = set()
        # Core attention's inputs: (storage, offset, shape) -> (storage, their own bytes)
        self.core_inputs: dict[tuple[object, ...], tuple[int, float]] = {}
        self.regathered: dict[int, float] = {}
        # Every storage whose address keys the maps above, kept alive while recording: a
        # freed storage's address is reused, and a new tensor would inherit its entries.
        self.storages: dict[int, Any] = {}
        self.model_flop_scale = 1.0
        self.host_calls = 0
        self.host_core_calls = 0
        self.fused_depth = 0
        self.inner_nodes = 0
        self.fp8_depth = 0
        # Other recomputed modules (recompute_modules): the ones the code runs inside, the
        # scopes each saved storage was saved under, what each checkpoint keeps (its inputs)
        # and discards (an output-discarding checkpoint's outputs), and which FP8 copy of a
        # gathered input a sequence-parallel linear layer keeps as which local shard.
        self.scope: tuple[str, ...] = ()
        self.saved_scopes: dict[int, list[tuple[str, ...]]] = {}
        self.module_inputs: dict[int, float] = {}
        self.discarded: set[int] = set()
        self.shard_of: dict[int, int] = {}
        # A sequence-parallel gather's output -> its local shard: the linear layer reading it
        # keeps the shard itself, one tensor with whatever else saves the shard (the router).
        self.gathered: dict[int, int] = {}
        # A kernel stand-in's own copy of a tensor the kernel itself would save as it is
        # (flash attention's contiguous Q, K and V): the copy's storage -> the tensor's.
        self.copy_of: dict[int, int] = {}
        self.host_module_calls = 0
        self.checkpoints = 0

    def __enter__(self) -> Recorder:
        _ACTIVE.append(self)
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        _ACTIVE.pop()

    @contextlib.contextmanager
    def tagged(self, region: str) -> Iterator[None]:
        previous, self.region = self.region, region
        try:
            yield
        finally:
            self.region = previous

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self.paused_depth += 1
        try:
            yield
        finally:
            self.paused_depth -= 1

    @contextlib.contextmanager
    def checkpointed(
        self, name: str, active: bool, *inputs: torch.Tensor, once: bool = True
    ) -> Iterator[list[torch.Tensor]]:
        """Run a module that selective recompute checkpoints (when ``active``): its ops carry
        ``name`` in their scope, its ``inputs`` are kept by the checkpoint, what it saves
        inside is not, and where the checkpoint discards its output (``CheckpointWithoutOutput``,
        ``OUTPUT_DISCARDING``) the tensors the caller appends to the yielded list are freed
        wherever they are saved (and the local shards of their sequence-parallel gathers).
        ``once`` false: a second part of a checkpoint already counted."""
        outputs: list[torch.Tensor] = []
        if not active:
            yield outputs
            return
        with self.paused():
            for tensor in inputs:  # a gathered input is kept as its local shard
                key = _storage(tensor)
                size = self.regathered.get(key, _nbytes(tensor))
                self.module_inputs[self.gathered.get(key, key)] = size
        self.checkpoints += once
        previous, self.scope = self.scope, (*self.scope, name)
        try:
            yield outputs
        finally:
            self.scope = previous
        with self.paused():
            self.discarded.update(_storage(tensor) for tensor in outputs)

    def host_call(self, calls: int = 1) -> None:
        """Count ``calls`` Python-level torch calls issued by the host (eager dispatch)."""
        if not self.paused_depth and not self.fused_depth:
            self.host_calls += calls
            if self.region == "core":
                self.host_core_calls += calls
            if self.scope:
                self.host_module_calls += calls

    @contextlib.contextmanager
    def fused(self) -> Iterator[None]:
        """One Python call (a jit-fused function or one custom kernel) whatever runs inside."""
        self.host_call()
        self.fused_depth += 1
        try:
            yield
        finally:
            self.fused_depth -= 1

    @contextlib.contextmanager
    def fp8(self) -> Iterator[None]:
        """GEMMs run inside are FP8 GEMMs (Transformer Engine linear layers): dtype ``fp8``."""
        self.fp8_depth += 1
        try:
            yield
        finally:
            self.fp8_depth -= 1

    @contextlib.contextmanager
    def scaled_model_flops(self, factor: float) -> Iterator[None]:
        """Count ``factor`` of the GEMM FLOPs run inside as model FLOPs (causal masking)."""
        previous, self.model_flop_scale = self.model_flop_scale, factor
        try:
            yield
        finally:
            self.model_flop_scale = previous

    def shared(self, tensor: torch.Tensor) -> torch.Tensor:
        """Mark ``tensor`` as one the whole step shares (Megatron's attention mask, built once
        per batch): what autograd saves of it is not a layer's."""
        self.excluded.add(_storage(tensor))
        return tensor

    @contextlib.contextmanager
    def saving(self, exclude: list[torch.Tensor]) -> Iterator[None]:
        """Track tensors autograd saves for backward; ``exclude`` (weights) is not counted."""
        self.excluded = {_storage(t) for t in exclude}

        def pack(tensor: torch.Tensor) -> torch.Tensor:
            key = _storage(tensor)
            if key not in self.excluded:
                size = self.regathered.get(key, float(tensor.untyped_storage().nbytes()))
                key = self.gathered.get(key, key)
                held, regions = self.saved.get(key, (size, set()))
                self.saved[key] = (max(held, size), regions)
                regions.add(self.region)
                self.saved_scopes.setdefault(key, []).append(self.scope)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield

    def keep_core_inputs(self, *tensors: torch.Tensor) -> None:
        """Mark the inputs of core attention: selective recompute keeps them (its checkpoint
        saves them), whatever else saves them or not. Each counts its own bytes: a view of
        the fused QKV output is not taken to keep that whole output (NVIDIA's selective
        recompute configs fit as measured only without it;
        docs/decisions/0029-selective-recompute-keeps-core-inputs.md)."""
        with self.paused():  # metadata, not calls the host makes
            for tensor in tensors:
                storage = _storage(tensor)
                key = (storage, tensor.storage_offset(), tuple(tensor.shape))
                self.core_inputs[key] = (storage, float(tensor.numel() * tensor.element_size()))

    def copy_regather(self, source: torch.Tensor, copy: torch.Tensor) -> None:
        """``copy`` (a cast of ``source``) is kept the way ``source`` would be: when
        ``source`` is a sequence all-gather that backward re-gathers, only the local shard."""
        shard = self.regathered.get(_storage(source))
        if shard is not None:
            self.regathered[_storage(copy)] = shard * copy.element_size() / source.element_size()
            if _storage(source) in self.gathered:
                self.shard_of[_storage(copy)] = self.gathered[_storage(source)]

    def same_storage(
        self, sources: Iterable[torch.Tensor], copies: Iterable[torch.Tensor]
    ) -> None:
        """Each of ``copies`` stands for its source itself (a copy a kernel stand-in makes
        where the kernel saves the very tensor it is given): an output-discarding checkpoint
        that frees the source frees the copy as well (``mla_up_proj`` discards the Q, K and V
        that core attention saved)."""
        with self.paused():
            for source, copy in zip(sources, copies, strict=True):
                key = _storage(source)
                self.copy_of[_storage(copy)] = self.copy_of.get(key, key)

    def saved_bytes(self, selective: bool, modules: bool = False) -> float:
        """Unique saved bytes; with ``selective``, without what only core attention keeps;
        with ``modules``, without what the other recomputed modules save inside or discard,
        their inputs kept (:meth:`checkpointed`)."""
        discarded = self._discarded() if modules else set()
        kept = {
            key: size
            for key, (size, regions) in self.saved.items()
            if not (selective and regions == {"core"})
            and not (modules and self._inside(key))
            and key not in discarded
        }
        total = sum(kept.values())
        if selective:  # the checkpoint around core attention keeps its inputs
            inputs = self.core_inputs.values()
            total += sum(
                size
                for storage, size in inputs
                if storage not in kept and storage not in discarded
            )
        if modules:  # each module's checkpoint keeps its inputs
            total += sum(
                size
                for storage, size in self.module_inputs.items()
                if storage not in kept
                and storage not in discarded
                and not self._regathered_only(storage, kept)
            )
        return total

    def _regathered_only(self, storage: int, kept: dict[int, float]) -> bool:
        """Whether a checkpoint's input is held only as the local shard of a kept FP8 copy
        of its gather (a sequence-parallel FP8 linear layer's input), counted there already."""
        held = any(self.shard_of.get(key) == storage for key in kept)
        return held and storage not in self.saved

    def _inside(self, key: int) -> bool:
        """Whether only recomputed modules saved storage ``key`` (an FP8 copy of a gather
        whose local shard a checkpoint keeps as its input is that input: kept)."""
        return all(self.saved_scopes[key]) and self.shard_of.get(key) not in self.module_inputs

    def _discarded(self) -> set[int]:
        """Storages an output-discarding checkpoint frees: its outputs, the kernels' own
        copies of them (:meth:`same_storage`) and the FP8 copies of gathers a linear layer
        keeps as their local shard, where the shard is one of them and is not saved on its own
        as well (the layer then saved the shard itself)."""
        copies = {copy for copy, source in self.copy_of.items() if source in self.discarded}
        return (
            self.discarded
            | copies
            | {
                gathered
                for gathered, shard in self.shard_of.items()
                if shard in self.discarded and shard not in self.saved
            }
        )

    def comm(self, name: str, group: str, nbytes: float, overlap: bool = False) -> None:
        self.host_call()  # the torch.distributed call
        self.ops.append(
            Op(
                name=name,
                category=COMM_CATEGORY,
                region=self.region,
                bytes=nbytes,
                group=group,
                overlap=overlap,
                scope=self.scope,
            )
        )

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if self.paused_depth or func.is_view or packet in _FREE:
            return out
        op = _op(func, args, kwargs, out, self.region)
        if self.model_flop_scale != 1.0 and op.category == "matmul":
            op = replace(op, model_flops=op.model_flops * self.model_flop_scale)
        if self.fp8_depth and op.category == "matmul":
            op = replace(op, dtype="fp8")
        if self.scope:
            op = replace(op, scope=self.scope)
        self.ops.append(op)
        self.observe(op, func, args, kwargs)
        return out

    def observe(self, op: Op, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Called for each recorded ATen op with its meta arguments (the profiler times it)."""


class HostCounter(TorchFunctionMode):
    """Count the Python-level torch calls of a forward (``TorchFunctionMode``).

    Eager PyTorch spends its CPU time per Python-level call (argument parsing, autograd
    recording, dispatch, launch), not per ATen kernel: ``F.linear`` is one call even though it
    dispatches ``t``, ``addmm`` and views. The mode is off inside its own handler, so only
    top-level calls are seen; metadata queries and calls made while the recorder is paused
    (stand-in tensors) are not counted.
    """

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if getattr(func, "__name__", "") not in _METADATA:
            self.recorder.host_call()
        return func(*args, **(kwargs or {}))


def autograd_nodes(root: Any, leaves: set[int]) -> int:
    """Autograd nodes reachable from ``root``: what the engine runs in backward.

    ``leaves`` (``id`` of leaf tensors) are the layer's inputs: their gradient flows on to the
    previous layer, so their ``AccumulateGrad`` is not run here. Weights' ``AccumulateGrad``
    is counted (Megatron accumulates into ``main_grad`` per weight).
    """
    seen: set[int] = set()
    stack = [root]
    count = 0
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) in leaves:
            continue
        count += 1
        stack.extend(next_node for next_node, _ in node.next_functions)
    return count


def _storage(tensor: torch.Tensor) -> int:
    """The address of ``tensor``'s storage, which the active recorder keeps alive."""
    storage = tensor.untyped_storage()
    key = int(storage._cdata)
    if _ACTIVE:
        _ACTIVE[-1].storages.setdefault(key, storage)
    return key


def _op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, region: str) -> Op:
    packet = func._overloadpacket
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
    outputs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors + outputs)
    flops = model_flops = 0.0
    if packet in flop_registry:
        flops = model_flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
    if packet in _ATTENTION:
        named = _named_args(func, args, kwargs)
        if named.get("is_causal"):
            flops = model_flops = flops / 2  # the causal mask skips half the score matrix
        if packet is _aten._scaled_dot_product_efficient_attention_backward:
            # The fused backward recomputes Q.K^T; Megatron's model FLOPs do not count it.
            q, k = named["query"], named["key"]
            b, h, sq, d = q.shape
            rescore = bmm_flop((b * h, sq, d), (b * h, d, k.shape[2]))
            model_flops -= rescore / (2 if named.get("is_causal") else 1)
    category = "matmul" if packet in _MATMUL else "attention" if packet in _ATTENTION else "memory"
    dtype = str(tensors[0].dtype).removeprefix("torch.") if tensors else ""
    return Op(
        name=str(func),
        category=category,
        region=region,
        flops=flops,
        model_flops=model_flops,
        bytes=float(nbytes),
        dtype=dtype,
        signature=_signature(args, kwargs),
        gemm=_gemm_shape(packet, outputs[0], flops) if category == "matmul" and outputs else None,
    )


def _gemm_shape(packet: Any, out: torch.Tensor, flops: float) -> tuple[int, int, int, int]:
    """``(batch, rows, depth, cols)`` of a matmul from its output and FLOPs (2 per multiply-add).

    Batched products (``bmm``, ``baddbmm``) keep their leading dimension; the others (``mm``,
    ``addmm``, ``linear``, ``matmul`` of activations by a weight) fold every leading dimension
    into the rows, as the GEMM that runs them does.
    """
    shape = tuple(out.shape) or (1,)
    if packet in _BATCHED_MATMUL and len(shape) == 3:
        batch, rows, cols = shape
    else:
        batch, rows, cols = 1, math.prod(shape[:-1]), shape[-1]
    outputs = batch * rows * cols
    depth = round(flops / (2 * outputs)) if outputs else 0
    return batch, rows, depth, cols


def _named_args(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    named = {arg.name: value for arg, value in zip(func._schema.arguments, args, strict=False)}
    return {**named, **kwargs}


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Shapes and literal arguments, e.g. ``[8,4096]bfloat16;[4096,1024]bfloat16;dim=-1``."""

    def one(value: Any) -> str:
        if isinstance(value, torch.Tensor):
            return f"[{','.join(map(str, value.shape))}]{str(value.dtype).removeprefix('torch.')}"
        if isinstance(value, (list, tuple)):
            return "(" + ",".join(one(v) for v in value) + ")"
        return repr(value)

    parts = [one(a) for a in args] + [f"{k}={one(v)}" for k, v in sorted(kwargs.items())]
    return ";".join(parts)


def _recorder() -> Recorder:
    return _ACTIVE[-1]


def _new(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    with _recorder().paused():
        return like.new_empty(shape)


def _nbytes(tensor: torch.Tensor) -> float:
    return float(tensor.numel() * tensor.element_size())
