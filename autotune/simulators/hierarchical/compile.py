"""Compile: run a layer's forward and backward on the meta device into a LayerGraph.

No weights, no arithmetic: the meta device only propagates shapes, while the
:class:`~autotune.simulators.hierarchical.record.Recorder` writes down every ATen operator and
collective. Graphs are cached by :class:`~autotune.simulators.hierarchical.graph.LayerShape` (its
canonical form).
"""

from __future__ import annotations

import functools

import torch

from autotune.simulators.hierarchical.graph import LayerGraph
from autotune.simulators.hierarchical.graph import LayerShape
from autotune.simulators.hierarchical.modules import DTYPES
from autotune.simulators.hierarchical.modules import build_module
from autotune.simulators.hierarchical.record import HostCounter
from autotune.simulators.hierarchical.record import Recorder
from autotune.simulators.hierarchical.record import autograd_nodes

__all__ = ["compile_layer", "trace_layer"]


def compile_layer(shape: LayerShape) -> LayerGraph:
    """Record one layer (one micro-batch, one rank): forward, backward, saved activations.

    Graphs are cached by :meth:`LayerShape.canonical`: shapes that differ only in fields
    their kind does not read share one.
    """
    return _compile(shape.canonical())


@functools.cache
def _compile(shape: LayerShape) -> LayerGraph:
    return trace_layer(shape, Recorder())


def trace_layer(shape: LayerShape, recorder: Recorder) -> LayerGraph:
    """Run the layer of ``shape`` forward and backward under ``recorder`` (not cached)."""
    module = build_module(shape)
    if shape.kind == "embedding":
        layer_input = torch.empty(shape.micro_batch, shape.seq_q, dtype=torch.long, device="meta")
    else:
        layer_input = torch.empty(
            shape.micro_batch,
            shape.tokens // shape.micro_batch,
            shape.model.hidden_size,
            dtype=DTYPES[shape.dtype],
            device="meta",
            requires_grad=True,
        )
    constants = [*module.parameters(), *module.buffers()]
    with recorder, HostCounter(recorder), recorder.saving(exclude=constants):
        out = module(layer_input)
    forward = tuple(recorder.ops)
    host_forward, host_core = recorder.host_calls, recorder.host_core_calls
    host_modules, checkpoints = recorder.host_module_calls, recorder.checkpoints
    host_backward = autograd_nodes(out.grad_fn, {id(layer_input)}) + recorder.inner_nodes
    grad = None if out.dim() == 0 else torch.empty_like(out)
    recorder.ops.clear()
    with recorder:
        out.backward(grad)
    backward = tuple(recorder.ops)
    host_backward += sum(op.category == "comm" for op in backward)  # torch.distributed calls
    experts = getattr(getattr(module, "mlp", None), "experts", None)
    expert_params = sum(p.numel() for p in experts.parameters()) if experts is not None else 0
    return LayerGraph(
        shape=shape,
        forward=forward,
        backward=backward,
        saved_bytes=recorder.saved_bytes(selective=False),
        selective_saved_bytes=recorder.saved_bytes(
            selective="core_attn" in shape.recomputed, modules=bool(checkpoints)
        ),
        input_bytes=float(layer_input.numel() * layer_input.element_size()),
        params=sum(p.numel() for p in module.parameters()) - expert_params,
        expert_params=expert_params,
        host_forward=host_forward,
        host_backward=host_backward,
        host_core=host_core,
        host_modules=host_modules,
        module_checkpoints=checkpoints,
    )
