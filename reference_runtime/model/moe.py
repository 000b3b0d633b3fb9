"""Sparse MoE of every backbone layer: top-k routed SwiGLU experts (block-FP8) plus a gated shared expert.

Router: softmax over all experts, keep the top-k, renormalise their weights. Routed expert weights are
dequantised per call, one expert at a time (the oracle favours plain code over speed, and one expert's bf16
copy is all the extra memory it ever holds: never the whole stack). Shared expert: SwiGLU(x) * sigmoid(gate(x)).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from reference_runtime.api import Weights
from reference_runtime.config import BackboneConfig
from reference_runtime.fp8 import dequantize_blocks

from .layers import swiglu, take


class SparseMoE:
    def __init__(self, weights: Weights, prefix: str, cfg: BackboneConfig, device: torch.device) -> None:
        E, h, inter, block = cfg.num_experts, cfg.hidden_size, cfg.moe_intermediate_size, cfg.fp8_block
        shared = cfg.shared_expert_intermediate_size
        self.top_k, self.block = cfg.num_experts_per_tok, block
        self.router = take(weights, f"{prefix}gate.weight", (E, h), device)
        self.gate_up = take(weights, f"{prefix}experts.gate_up_proj", (E, 2 * inter, h), device)
        self.gate_up_scale = take(weights, f"{prefix}experts.gate_up_proj_scale_inv",
                                  (E, 2 * inter // block, h // block), device)
        self.down = take(weights, f"{prefix}experts.down_proj", (E, h, inter), device)
        self.down_scale = take(weights, f"{prefix}experts.down_proj_scale_inv", (E, h // block, inter // block),
                               device)
        self.shared_gate = take(weights, f"{prefix}shared_expert.gate_proj.weight", (shared, h), device)
        self.shared_up = take(weights, f"{prefix}shared_expert.up_proj.weight", (shared, h), device)
        self.shared_down = take(weights, f"{prefix}shared_expert.down_proj.weight", (h, shared), device)
        self.shared_expert_gate = take(weights, f"{prefix}shared_expert_gate.weight", (1, h), device)
        # Tokens routed to each expert so far: a cheap diagnostic for routing tests and profiling.
        self.expert_counts = torch.zeros(E, dtype=torch.long, device=device)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (T, hidden) -> (weights (T, k) fp32 summing to 1, expert ids (T, k))."""
        probs = torch.softmax(F.linear(x, self.router).float(), dim=-1)
        top, experts = probs.topk(self.top_k, dim=-1)
        return top / top.sum(-1, keepdim=True), experts

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        weights, experts = self.route(x)
        self.expert_counts += torch.bincount(experts.flatten(), minlength=self.expert_counts.numel())
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in experts.unique().tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            gate_up = dequantize_blocks(self.gate_up[e], self.gate_up_scale[e], self.block, x.dtype)
            down = dequantize_blocks(self.down[e], self.down_scale[e], self.block, x.dtype)
            gate, up = F.linear(x[rows], gate_up).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, down)
            out.index_add_(0, rows, y.float() * weights[rows, slot][:, None])
        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)
        shared = shared * torch.sigmoid(F.linear(x, self.shared_expert_gate))
        return (out + shared.float()).to(x.dtype)
