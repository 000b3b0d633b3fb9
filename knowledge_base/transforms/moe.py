"""MoE transforms: dequantise the block-FP8 experts once at build time, and dispatch tokens to experts without
a Python loop over experts (and without the loop's host sync on `experts.unique().tolist()`).
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

MOE = "moe.py"

_DEQUANT_PER_CALL = """\
            gate_up = dequantize_blocks(self.gate_up[e], self.gate_up_scale[e], self.block, x.dtype)
            down = dequantize_blocks(self.down[e], self.down_scale[e], self.block, x.dtype)
"""
_SHARED_GATE = """\
        self.shared_expert_gate = take(weights, f"{prefix}shared_expert_gate.weight", (1, h), device)
"""


def _dequant_at_build(files: Files, params: Params) -> list[Patch]:
    return [
        replace_once(files, MOE, _SHARED_GATE, _SHARED_GATE + """\
        # Dequantised once here instead of on every call (same values: the same tiles times the same scales).
        self.gate_up_w = dequantize_blocks(self.gate_up, self.gate_up_scale, block, self.router.dtype)  # (E, 2I, h)
        self.down_w = dequantize_blocks(self.down, self.down_scale, block, self.router.dtype)  # (E, h, I)
"""),
        replace_once(files, MOE, _DEQUANT_PER_CALL, "            gate_up, down = self.gate_up_w[e], self.down_w[e]\n"),
    ]


fp8_dequant_at_build = Transform(
    name="fp8_dequant_at_build",
    impact={"cpu": 1.037,  # measured alone in the CPU demo (docs/benchmarks.md)
            # < 1 so it goes last: at full size it adds a bf16 copy of every expert (~64 GB) next to the reference
            # engine's 37 GB on the same GPU, which an H200 lacks (session 5: CUBLAS_STATUS_ALLOC_FAILED at build)
            "cuda": 0.8},
    summary="dequantise the block-FP8 routed experts once in build_engine instead of on every MoE call",
    feature="fp8_moe",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_dequant_at_build,
    lesson="Exact (same tiles times the same scales). On drama3-tiny CPU the MoE call gets ~10x cheaper; on the "
           "full model it costs the bf16 copy of every expert (about 64 GB), which an H200 holds but a smaller "
           "GPU may not.",
)

_LOOP_CALL = """\
        self.expert_counts += torch.bincount(experts.flatten(), minlength=self.expert_counts.numel())
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in experts.unique().tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            gate_up, down = self.gate_up_w[e], self.down_w[e]
            gate, up = F.linear(x[rows], gate_up).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, down)
            out.index_add_(0, rows, y.float() * weights[rows, slot][:, None])
        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)
        shared = shared * torch.sigmoid(F.linear(x, self.shared_expert_gate))
        return (out + shared.float()).to(x.dtype)
"""
_DISPATCH_CALL = """\
        # index_add_ instead of bincount: bincount sizes its output on the host (a device sync on GPU).
        self.expert_counts.index_add_(0, experts.flatten(), torch.ones_like(experts.flatten()))
        if x.shape[0] <= {max_tokens}:
            out = self._dispatch(x, weights, experts)
        else:
            out = self._grouped(x, weights, experts)
        shared = swiglu(x, self.shared_gate, self.shared_up, self.shared_down)
        shared = shared * torch.sigmoid(F.linear(x, self.shared_expert_gate))
        return (out + shared.float()).to(x.dtype)

    def _grouped(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        \"\"\"Long prefills: one matmul per active expert, so no (T*k)-fold copies of expert weights.\"\"\"
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in experts.unique().tolist():
            rows, slot = (experts == e).nonzero(as_tuple=True)
            gate, up = F.linear(x[rows], self.gate_up_w[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, self.down_w[e])
            out.index_add_(0, rows, y.float() * weights[rows, slot][:, None])
        return out
"""
_GATHER = '''
    def _dispatch(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """Each (token, slot) pair multiplies its own gathered expert weights: two batched matmuls, no loop."""
        T, k = experts.shape
        ids = experts.flatten()  # (T*k,), token-major
        xs = x[:, None, :].expand(T, k, x.shape[-1]).reshape(T * k, x.shape[-1])
        gate, up = torch.bmm(self.gate_up_w[ids], xs[:, :, None])[..., 0].chunk(2, dim=-1)
        y = torch.bmm(self.down_w[ids], (F.silu(gate) * up)[:, :, None])[..., 0]  # (T*k, h)
        return (y.float() * weights.reshape(T * k, 1)).view(T, k, -1).sum(dim=1)
'''
_DENSE = '''
    def _dispatch(self, x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
        """Every expert on every token, weighted by a dense (T, E) routing matrix that is zero off the top-k:
        more arithmetic, but three matmuls instead of a loop (a win when experts are few and small)."""
        gate, up = torch.matmul(x, self.gate_up_w.transpose(1, 2)).chunk(2, dim=-1)  # (E, T, I) each
        y = torch.matmul(F.silu(gate) * up, self.down_w.transpose(1, 2))  # (E, T, h)
        dense = torch.zeros(experts.shape[0], self.gate_up_w.shape[0], device=x.device).scatter(1, experts, weights)
        return torch.einsum("eth,te->th", y.float(), dense)
'''


def _dispatch(files: Files, params: Params) -> list[Patch]:
    method = {"gather": _GATHER, "dense": _DENSE}[str(params["strategy"])]
    return [replace_once(files, MOE, _LOOP_CALL,
                         _DISPATCH_CALL.format(max_tokens=int(params["max_tokens"])) + method)]


moe_dispatch = Transform(
    name="moe_dispatch",
    impact={"cpu": 0.993,  # measured in the CPU demo (strategy=gather, on fp8_dequant_at_build + gqa_sdpa)
            # a guess: the eager frame loses 40 expert loops with a host sync each; reached only after
            # fp8_dequant_at_build, which does not fit next to the reference on an H200
            "cuda": 1.2},
    summary="route tokens to experts with batched matmuls (gathered expert weights, or all experts densely) "
            "instead of a Python loop over the active experts with a host sync",
    feature="fp8_moe",
    devices=frozenset({"cpu", "cuda"}),
    proven=frozenset({"cpu"}),
    apply=_dispatch,
    space={"strategy": ("gather", "dense"), "max_tokens": (1, 64)},
    requires=("fp8_dequant_at_build",),
    lesson="Removes the per-layer host sync of the expert loop. 'dense' runs every expert and only pays off "
           "with few, small experts (drama3-tiny); with 256 experts use 'gather'. max_tokens bounds the gathered "
           "weight copies in prefill.",
)
