"""The prefill's two Triton calls (the delta rule over the prompt, the grouped FP8 experts) as custom ops: to
torch.compile (COMPILE_STEPS) each is one opaque node of known output shape, so dynamo neither traces Triton nor
unrolls the CPU fallback's token loop, and a backbone layer stays one graph (no graph breaks, whose resume
functions would compile again per bucket). Called eagerly, or replayed from a CUDA graph, an op is its function.
The ops' namespace is the package's name: several engine packages may be loaded in one process.
"""
from __future__ import annotations

import torch

_NAMESPACE = __package__.replace(".", "_")


@torch.library.custom_op(f"{_NAMESPACE}::delta_rule", mutates_args=("state",))
def delta_rule_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor,
                  state: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """deltanet.delta_rule."""
    from .deltanet import delta_rule  # deltanet imports this module

    return delta_rule(q, k, v, beta, g, state, valid)


@delta_rule_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, g: torch.Tensor, state: torch.Tensor,
      valid: torch.Tensor | None) -> torch.Tensor:
    return v.new_empty(v.shape)


@torch.library.custom_op(f"{_NAMESPACE}::grouped_fp8_experts", mutates_args=())
def grouped_experts_op(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, gate_up: torch.Tensor,
                       gate_up_scale: torch.Tensor, down: torch.Tensor, down_scale: torch.Tensor,
                       block: int) -> torch.Tensor:
    """grouped_moe.grouped_fp8_experts."""
    from .grouped_moe import grouped_fp8_experts  # imports Triton: only where the caller found it can run

    return grouped_fp8_experts(x, weights, experts, gate_up, gate_up_scale, down, down_scale, block)


@grouped_experts_op.register_fake
def _(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, gate_up: torch.Tensor,
      gate_up_scale: torch.Tensor, down: torch.Tensor, down_scale: torch.Tensor, block: int) -> torch.Tensor:
    return x.new_empty(x.shape, dtype=torch.float32)
