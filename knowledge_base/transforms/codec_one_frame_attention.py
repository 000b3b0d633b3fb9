"""codec_one_frame_attention: the codec transformer's attention on a one-frame window is its value projection. A
lone frame's only key is itself, so the softmax weight is exactly 1 and the attention output is v: the query and
key projections, their RoPE and the attention kernel change nothing. The stream's first window (time to first
audio) is one frame; every later window carries left context and keeps the full attention.
"""
from __future__ import annotations

from .base import Files, Params, Patch, Transform, replace_once

CODEC = "codec.py"
_FORWARD = '''\
    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.wqkv(x).view(b, t, 3, self.heads, self.head_dim).unbind(2)
'''


def _apply(files: Files, params: Params) -> list[Patch]:
    return [replace_once(files, CODEC, _FORWARD, '''\
    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if t == 1:  # codec_one_frame_attention: the lone key's softmax weight is exactly 1, so the output is v
            return self.wo(F.linear(x, self.wqkv.weight[2 * self.heads * self.head_dim:]))
        q, k, v = self.wqkv(x).view(b, t, 3, self.heads, self.head_dim).unbind(2)
''')]


codec_one_frame_attention = Transform(
    name="codec_one_frame_attention",
    # measured on an H100 (session 39, docs/benchmarks.md): the 1-frame window 0.850 -> 0.755 ms at drama3-mid,
    # 1.052 -> 0.935 ms on the full model's codec; the full model's TTFA moved within its noise (+-0.2 ms of 14-23)
    first_audio={"cuda": 1.004},
    summary="compute the codec transformer's attention on a one-frame window (the stream's first) as its value "
            "projection: the lone key's softmax weight is exactly 1, so q, k, RoPE and the attention kernel go",
    feature="codec",
    devices=frozenset({"cuda"}),
    proven=frozenset({"cuda"}),
    apply=_apply,
    lesson="Attention over a single key returns its value whatever the query: on a one-frame window (a stream's "
           "first chunk) the query and key projections, RoPE and the attention kernel can be skipped exactly. It "
           "saves a few launches and 4 MB of reads per codec layer on the time to first audio only; later windows "
           "carry left context.",
)
