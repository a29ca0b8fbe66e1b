"""Specs shared by the simulator tests, built without Hydra (shapes: specs.md section 2)."""

from __future__ import annotations

from simulators import ClusterSpec
from simulators import DeviceSpec
from simulators import LinkSpec
from simulators import ModelSpec

MODELS: dict[str, dict[str, object]] = {
    "llama2_7b": dict(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=11008,
        num_attention_heads=32,
        num_kv_heads=32,
        vocab_size=32000,
    ),
    "llama2_70b": dict(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=28672,
        num_attention_heads=64,
        num_kv_heads=8,
        vocab_size=32000,
    ),
    "llama3_8b": dict(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=14336,
        num_attention_heads=32,
        num_kv_heads=8,
        vocab_size=128256,
    ),
    "qwen2_5_72b": dict(
        num_layers=80,
        hidden_size=8192,
        ffn_hidden_size=29568,
        num_attention_heads=64,
        num_kv_heads=8,
        vocab_size=152064,
        qkv_bias=True,
    ),
    "gpt3_175b": dict(
        num_layers=96,
        hidden_size=12288,
        ffn_hidden_size=49152,
        num_attention_heads=96,
        num_kv_heads=96,
        vocab_size=51200,
        activation="gelu",
        norm="layernorm",
        qkv_bias=True,
        tied_embeddings=True,
    ),
    "mixtral_8x7b": dict(
        num_layers=32,
        hidden_size=4096,
        ffn_hidden_size=0,
        num_attention_heads=32,
        num_kv_heads=8,
        vocab_size=32000,
        num_experts=8,
        moe_top_k=2,
        expert_ffn_hidden_size=14336,
    ),
    "mixtral_8x22b": dict(
        num_layers=56,
        hidden_size=6144,
        ffn_hidden_size=0,
        num_attention_heads=48,
        num_kv_heads=8,
        vocab_size=32000,
        num_experts=8,
        moe_top_k=2,
        expert_ffn_hidden_size=16384,
    ),
    "qwen3_235b_a22b": dict(
        num_layers=94,
        hidden_size=4096,
        ffn_hidden_size=12288,
        num_attention_heads=64,
        num_kv_heads=4,
        vocab_size=151936,
        num_experts=128,
        moe_top_k=8,
        expert_ffn_hidden_size=1536,
    ),
    "deepseek_v3": dict(
        num_layers=61,
        hidden_size=7168,
        ffn_hidden_size=18432,
        num_attention_heads=128,
        num_kv_heads=128,
        head_dim=192,
        vocab_size=129280,
        num_experts=256,
        moe_top_k=8,
        expert_ffn_hidden_size=2048,
        shared_expert_ffn_hidden_size=2048,
        first_dense_layers=3,
        attention="mla",
        q_lora_rank=1536,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
}


def model(key: str, /, **changes: object) -> ModelSpec:
    """The catalog model ``key`` (head_dim 128 unless given), with fields changed."""
    values: dict[str, object] = {"name": key, "head_dim": 128, **MODELS[key], **changes}
    return ModelSpec(**values)  # type: ignore[arg-type]


def ascend(num_nodes: int) -> ClusterSpec:
    """Atlas 800T A2 nodes of 8 x 910B2 (the figures of conf/cluster/ascend.yaml)."""
    device = DeviceSpec(
        name="Ascend 910B2",
        bf16_tflops=353.9,
        fp16_tflops=376.0,
        fp32_tflops=99.5,
        memory_gib=64.0,
        memory_gbps=1759.0,
        matmul_efficiency=0.8,
        memory_efficiency=0.4,
    )
    return ClusterSpec(
        name="ascend",
        device=device,
        devices_per_node=8,
        num_nodes=num_nodes,
        intra_node=LinkSpec(
            topology="full_mesh",
            bandwidth_gbps=196.0,
            peer_link_gbps=28.0,
            latency_us=10.0,
            efficiency=0.7,
        ),
        inter_node=LinkSpec(bandwidth_gbps=25.0, latency_us=11.5, efficiency=0.7),
    )
