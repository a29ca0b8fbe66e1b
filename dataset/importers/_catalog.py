"""Architectures of the named models in the raw files, as schema-v1 columns.

Every value is from shared/reference/specs.md section 2 (the project's verified catalog, tags
[V]/[S] there). A model that is not in that catalog is not guessed: its rows are skipped and
listed in dataset/data/NOTICE.md.
"""

from __future__ import annotations

__all__ = ["ARCHITECTURES", "GPT_BLOCK", "gpt_model"]

# The GPT block of Megatron-LM (GPT-2/3 family): GeLU MLP of 4h, LayerNorm, biases, tied
# embeddings (specs.md 2.1 row GPT-3 175B).
GPT_BLOCK: dict[str, object] = {
    "activation": "gelu",
    "norm": "layernorm",
    "qkv_bias": True,
    "tied_embeddings": True,
}


def gpt_model(num_layers: int, hidden_size: int, heads: int, vocab_size: int) -> dict[str, object]:
    """The architecture columns of a Megatron GPT model (MHA, FFN 4h, the GPT block)."""
    return {
        "num_layers": num_layers,
        "hidden_size": hidden_size,
        "ffn_hidden_size": 4 * hidden_size,
        "num_attention_heads": heads,
        "num_kv_heads": heads,
        "vocab_size": vocab_size,
        **GPT_BLOCK,
    }


def _dense(
    layers: int, hidden: int, ffn: int, heads: int, kv: int, vocab: int, bias: bool = False
) -> dict[str, object]:
    return {
        "num_layers": layers,
        "hidden_size": hidden,
        "ffn_hidden_size": ffn,
        "num_attention_heads": heads,
        "num_kv_heads": kv,
        "head_dim": 128,
        "vocab_size": vocab,
        "activation": "swiglu",
        "norm": "rmsnorm",
        "qkv_bias": bias,
        "tied_embeddings": False,
    }


def _mixtral(layers: int, hidden: int, heads: int, expert_ffn: int) -> dict[str, object]:
    # specs.md 2.2: 8 experts, top-2, no shared expert, no dense layer, kv heads 8, V 32000.
    return {
        **_dense(layers, hidden, expert_ffn, heads, 8, 32000),
        "num_experts": 8,
        "moe_top_k": 2,
        "expert_ffn_hidden_size": expert_ffn,
    }


def _deepseek(
    layers: int,
    hidden: int,
    dense_ffn: int,
    vocab: int,
    experts: int,
    top_k: int,
    expert_ffn: int,
    shared: int,
    first_dense: int,
    q_lora: int,
    heads: int = 128,
) -> dict[str, object]:
    # specs.md 2.3: MLA with kv_lora 512 and qk_nope/qk_rope/v head dims 128/64/128.
    return {
        **_dense(layers, hidden, dense_ffn, heads, heads, vocab),
        "num_experts": experts,
        "moe_top_k": top_k,
        "expert_ffn_hidden_size": expert_ffn,
        "shared_expert_ffn_hidden_size": shared * expert_ffn,
        "first_dense_layers": first_dense,
        "attention": "mla",
        "q_lora_rank": q_lora,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }


# Keys are the catalog names of specs.md section 2.
ARCHITECTURES: dict[str, dict[str, object]] = {
    "Llama-2-7B": _dense(32, 4096, 11008, 32, 32, 32000),
    "Llama-2-13B": _dense(40, 5120, 13824, 40, 40, 32000),
    "Llama-2-70B": _dense(80, 8192, 28672, 64, 8, 32000),
    "Llama-3-8B": _dense(32, 4096, 14336, 32, 8, 128256),
    "Llama-3-70B": _dense(80, 8192, 28672, 64, 8, 128256),
    "Llama-3.1-405B": _dense(126, 16384, 53248, 128, 8, 128256),
    "Qwen2-7B": _dense(28, 3584, 18944, 28, 4, 152064, bias=True),
    "Qwen2.5-14B": _dense(48, 5120, 13824, 40, 8, 152064, bias=True),
    "Qwen2.5-32B": _dense(64, 5120, 27648, 40, 8, 152064, bias=True),
    "Qwen2-72B": _dense(80, 8192, 29568, 64, 8, 152064, bias=True),
    "Baichuan2-7B": _dense(32, 4096, 11008, 32, 32, 125696),
    "Baichuan2-13B": _dense(40, 5120, 13696, 40, 40, 125696),
    "ChatGLM3-6B": _dense(28, 4096, 13696, 32, 2, 65024, bias=True),
    "GLM-4-9B": _dense(40, 4096, 13696, 32, 2, 151552, bias=True),
    "InternLM2-20B": _dense(48, 6144, 16384, 48, 8, 92544),
    # GPT-3: V = 50257 padded by Megatron to 51200 (specs.md 2.1).
    "GPT-3-175B": {**_dense(96, 12288, 49152, 96, 96, 51200), **GPT_BLOCK},
    "Mixtral-8x7B": _mixtral(32, 4096, 32, 14336),
    "Mixtral-8x22B": _mixtral(56, 6144, 48, 16384),
    "DeepSeek-V2-Lite": _deepseek(27, 2048, 10944, 102400, 64, 6, 1408, 2, 1, 0, heads=16),
    "DeepSeek-V2": _deepseek(60, 5120, 12288, 102400, 160, 6, 1536, 2, 1, 1536),
    "DeepSeek-V3": _deepseek(61, 7168, 18432, 129280, 256, 8, 2048, 1, 3, 1536),
}
