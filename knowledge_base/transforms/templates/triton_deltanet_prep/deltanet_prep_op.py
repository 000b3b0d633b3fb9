"""triton_deltanet_prep's call as a custom op: to torch.compile (the compiled prefill) the front kernel and the delta
rule are one opaque node of known output shapes, as prefill_ops.py does for the delta rule alone; called eagerly,
or replayed from a CUDA graph, the op is its function. Triton is imported only when the op runs. The namespace is
the package's name: several engine packages may be loaded in one process.
"""
from __future__ import annotations

import torch

_NAMESPACE = __package__.replace(".", "_")


@torch.library.custom_op(f"{_NAMESPACE}::prepped_delta_rule", mutates_args=("recurrent",))
def prepped_delta_rule_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, a: torch.Tensor,
                          conv_taps: torch.Tensor, conv_state: torch.Tensor, a_log: torch.Tensor,
                          dt_bias: torch.Tensor, recurrent: torch.Tensor, valid: torch.Tensor | None,
                          key_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GatedDeltaNet's conv, SiLU, norms, gates (deltanet_prep) and delta rule (deltanet.delta_rule: the engine's
    kernel for it) from the in-projection's columns; updates the recurrent state (nv, dk, dv) fp32 in place.
    Returns (o (T, nv, dv) fp32, the next conv state)."""
    from .deltanet import delta_rule  # deltanet imports this module
    from .deltanet_prep import deltanet_prep

    q, k, v, beta, g, conv = deltanet_prep(q, k, v, b, a, conv_taps, conv_state, a_log, dt_bias, valid, key_dim)
    return delta_rule(q, k, v, beta, g, recurrent, valid), conv


@prepped_delta_rule_op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, a: torch.Tensor, conv_taps: torch.Tensor,
      conv_state: torch.Tensor, a_log: torch.Tensor, dt_bias: torch.Tensor, recurrent: torch.Tensor,
      valid: torch.Tensor | None, key_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    T, nv = b.shape
    return v.new_empty((T, nv, v.shape[1] // nv), dtype=torch.float32), conv_state.new_empty(conv_state.shape)
