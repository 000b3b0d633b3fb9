"""One-token sparse MoE without a host sync: top-k routing on the device, the selected experts' block-FP8
weights gathered by index and dequantised, two batched matmuls; the shared expert rides on the router GEMV.
`routed_experts` is the part fused kernels replace (triton_fp8_moe).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.config import BackboneConfig
from reference_runtime.fp8 import FP8_DTYPE, dequantize_blocks

from .decode_weights import MoEWeights


def routed_experts(x: torch.Tensor, top: torch.Tensor, ids: torch.Tensor, w: MoEWeights,
                   cfg: BackboneConfig) -> torch.Tensor:
    """x (1, hidden), routing weights top (k,) fp32 and expert ids (k,) -> sum_k top_k expert_k(x), (1, hidden) fp32."""
    k, block = ids.shape[0], cfg.fp8_block
    gate_up = dequantize_blocks(w.gate_up[ids].view(FP8_DTYPE), w.gate_up_scale[ids], block, x.dtype)  # (k, 2I, H)
    down = dequantize_blocks(w.down[ids].view(FP8_DTYPE), w.down_scale[ids], block, x.dtype)  # (k, H, I)
    gate, up = torch.bmm(gate_up, x.expand(k, -1)[:, :, None])[..., 0].chunk(2, dim=-1)
    y = torch.bmm(down, (F.silu(gate) * up)[:, :, None])[..., 0]  # (k, H)
    return (y.float() * top[:, None]).sum(0, keepdim=True)


def moe_decode(x: torch.Tensor, w: MoEWeights, cfg: BackboneConfig) -> torch.Tensor:
    """x (1, hidden) -> (1, hidden)."""
    logits, shared_gate, shared_up, shared_scale = w.proj(x)
    probs = torch.softmax(logits.float(), dim=-1)
    top, ids = probs[0].topk(cfg.num_experts_per_tok)
    routed = routed_experts(x, top / top.sum(), ids, w, cfg)
    shared = F.linear(F.silu(shared_gate) * shared_up, w.shared_down) * torch.sigmoid(shared_scale)
    return (routed + shared.float()).to(x.dtype)
