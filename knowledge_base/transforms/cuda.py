"""CUDA-only transforms: capture the backbone decode step into CUDA graphs over static buffers, and
torch.compile the tower layers' dense parts for the one-row decode step.
"""
from __future__ import annotations

from .base import (
    Files,
    NotApplicable,
    Params,
    Patch,
    Transform,
    replace_once,
    template_files,
)

_DECODE_BACKBONE = """\
        row = req.last_frame[None]
        position = torch.tensor([req.num_rows], device=self.device)
        req.num_rows += 1
        hidden = self.model.backbone(row[:, 0], position, req.backbone_caches)
"""
_CONV_STATE = "        state.conv = window[-(self.kernel - 1):].clone()\n"
_PREFILL_CACHES = ("backbone_caches=backbone.new_caches()", "backbone_caches=_reset(self._backbone_caches)")


def _graphs(files: Files, params: Params) -> list[Patch]:
    if "graph_engine.py" in files:
        raise NotApplicable("cuda_graph_frame already graphs the whole frame, backbone included")
    prefill = next((p for p in _PREFILL_CACHES if files.get("engine.py", "").count(p) == 1), None)
    if prefill is None:
        raise NotApplicable("engine.py: prefill does not create the backbone caches where expected")
    return [
        *template_files(files, "cuda_graph_backbone"),
        # In place: a graph replays fixed addresses, so the state must not be rebound to a new tensor.
        replace_once(files, "deltanet.py", _CONV_STATE, "        state.conv.copy_(window[-(self.kernel - 1):])\n"),
        replace_once(files, "engine.py", "from .kv_cache import KVCache\n",
                     "from .graphs import GraphedBackbone\nfrom .kv_cache import KVCache\n"),
        replace_once(files, "engine.py", "        self._request: RequestState | None = None\n", f"""\
        self._request: RequestState | None = None
        self.graphed = GraphedBackbone(model.backbone, config, device, min_bucket={int(params["min_bucket"])})
"""),
        replace_once(files, "engine.py", prefill, "backbone_caches=self.graphed.reset()"),
        replace_once(files, "engine.py", _DECODE_BACKBONE, """\
        row = req.last_frame[None]
        req.num_rows += 1
        hidden = self.graphed.step(row[:, 0], req.num_rows - 1)
"""),
    ]


cuda_graph_backbone = Transform(
    name="cuda_graph_backbone",
    # a guess: the backbone is ~2/3 of the frame (7.9 of 11.8 ms graphed on the H200) and the tower and sampling
    # stay eager, so ~250 -> ~90 ms/frame; reached only through fp8_dequant_at_build (no room on an H200)
    impact={"cuda": 2.5},
    summary="replay the backbone's per-frame decode step (40 layers) as one CUDA graph per KV-length bucket, "
            "over static KV buffers and in-place DeltaNet state, instead of launching every kernel from Python",
    feature="decode_graph",
    devices=frozenset({"cuda"}),
    apply=_graphs,
    space={"min_bucket": (1024, 256)},
    requires=("moe_dispatch",),  # the graph needs a MoE without host syncs
    lesson="Removes Python launch overhead of the backbone step only; the tower and sampling stay eager (pair "
           "with compile_tower). Attention reads a whole KV bucket per step, so smaller buckets suit short "
           "utterances.",
)

_TOWER_LAYER_CALL = """\
        x = F.linear(torch.cat((rms_norm(e, self.enorm, self.eps), rms_norm(h, self.hnorm, self.eps)), -1),
                     self.eh_proj)
        x = x + self.self_attn(rms_norm(x, self.input_layernorm, self.eps), positions, cache)
        x = x + swiglu(rms_norm(x, self.post_attention_layernorm, self.eps), self.gate_proj, self.up_proj,
                       self.down_proj)
        return rms_norm(x, self.final_norm, self.eps)
"""
_COMPILED = '''

def _enter(h: torch.Tensor, e: torch.Tensor, enorm: torch.Tensor, hnorm: torch.Tensor, eh_proj: torch.Tensor,
           input_norm: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    x = F.linear(torch.cat((rms_norm(e, enorm, eps), rms_norm(h, hnorm, eps)), -1), eh_proj)
    return x, rms_norm(x, input_norm, eps)


def _leave(x: torch.Tensor, post_norm: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor,
           final_norm: torch.Tensor, eps: float) -> torch.Tensor:
    x = x + swiglu(rms_norm(x, post_norm, eps), gate, up, down)
    return rms_norm(x, final_norm, eps)


_compiled: dict[str, Callable] = {}


def _fused(fn: Callable, x: torch.Tensor) -> Callable:
    """fn compiled (once, static shapes) for the one-row CUDA decode step; eager everywhere else, so prefill
    lengths never trigger recompiles."""
    if not (x.is_cuda and x.shape[0] == 1):
        return fn
    if fn.__name__ not in _compiled:
        _compiled[fn.__name__] = torch.compile(fn, mode="{mode}", dynamic=False)
    return _compiled[fn.__name__]
'''


def _compile(files: Files, params: Params) -> list[Patch]:
    if "graph_engine.py" in files:
        raise NotApplicable("cuda_graph_frame runs its own tower step; compiling TowerLayer would be dead code")
    return [
        replace_once(files, "tower.py", _TOWER_LAYER_CALL, """\
        x, normed = _fused(_enter, h)(h, e, self.enorm, self.hnorm, self.eh_proj, self.input_layernorm, self.eps)
        x = x + self.self_attn(normed, positions, cache)
        return _fused(_leave, x)(x, self.post_attention_layernorm, self.gate_proj, self.up_proj, self.down_proj,
                                 self.final_norm, self.eps)
"""),
        replace_once(files, "tower.py", "\n\ndef is_semantic_token(",
                     _COMPILED.replace("{mode}", str(params["mode"])) + "\n\ndef is_semantic_token("),
    ]


compile_tower = Transform(
    name="compile_tower",
    # a guess: the tower + lm_head is ~1/4 of the frame (2.8 of 11.8 ms graphed on the H200) and fusion removes
    # about a third of its eager kernels
    impact={"cuda": 1.08},
    summary="torch.compile the tower layers' norms, eh_proj and SwiGLU MLP for the one-row decode step "
            "(fused elementwise kernels around the matmuls); attention with its KV cache stays eager",
    feature="codebook_mtp",
    devices=frozenset({"cuda"}),
    apply=_compile,
    space={"mode": ("max-autotune-no-cudagraphs", "default")},
    lesson="The first decode compiles (tens of seconds, inside the evaluator's correctness stage); fused bf16 "
           "norms can move logits by a few ulps.",
)
