"""Drama 3 model configuration: the full `drama3` dims (../shared/docs/drama3_arch.md §1) and `drama3-tiny`.

`drama3-tiny` keeps every structural feature (3:1 GDN/attention pattern, MoE with FP8 block experts and a
gated shared expert, 13-layer codebook-MTP tower over 10 codebooks, DAC-style codec with 2048 samples per
frame) at dims small enough that a whole generation runs on 2 CPU cores in seconds.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

SPECIAL_TOKENS: tuple[str, ...] = (
    "<|im_start|>", "<|im_end|>", "<|voice|>", *(f"<|speaker:{i}|>" for i in range(16)),
)


@dataclass(frozen=True, slots=True)
class BackboneConfig:
    num_layers: int = 40
    hidden_size: int = 2048
    full_attention_interval: int = 4  # layer i is full attention iff (i + 1) % interval == 0
    num_attention_heads: int = 16
    num_key_value_heads: int = 2
    head_dim: int = 256
    rotary_dim: int = 64  # partial RoPE: first 64 of 256 dims, non-interleaved
    rope_theta: float = 1e7
    linear_num_key_heads: int = 16
    linear_num_value_heads: int = 32
    linear_key_head_dim: int = 128
    linear_value_head_dim: int = 128
    linear_conv_kernel: int = 4
    num_experts: int = 256
    num_experts_per_tok: int = 8
    moe_intermediate_size: int = 512
    shared_expert_intermediate_size: int = 512
    fp8_block: int = 128  # routed-expert weights are float8_e4m3fn in fp8_block x fp8_block tiles with fp32 scales
    rms_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        assert self.num_layers % self.full_attention_interval == 0, "layer pattern must tile the stack"
        assert self.linear_num_value_heads % self.linear_num_key_heads == 0
        assert self.num_attention_heads % self.num_key_value_heads == 0
        assert self.rotary_dim <= self.head_dim and self.rotary_dim % 2 == 0
        assert self.hidden_size % self.fp8_block == 0 and self.moe_intermediate_size % self.fp8_block == 0
        assert self.num_experts_per_tok <= self.num_experts

    def is_full_attention(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval == 0


@dataclass(frozen=True, slots=True)
class TowerConfig:
    """Codebook-MTP tower: num_shared_layers shared layers, then one residual layer per codebook 1..9."""

    num_shared_layers: int = 4
    num_attention_heads: int = 16  # the loader enforces equality with the backbone's geometry
    num_key_value_heads: int = 2
    head_dim: int = 256
    rotary_dim: int = 64  # interleaved RoPE on the first 64 dims
    rope_theta: float = 1e7
    intermediate_size: int = 6144
    head_size: int = 4096  # logits per residual codebook head (codes 1..9)
    rms_norm_eps: float = 1e-6


@dataclass(frozen=True, slots=True)
class CodecConfig:
    """DAC-style decoder: residual-VQ dequantisation -> causal windowed transformer -> upsample -> conv decoder."""

    sample_rate: int = 44100
    semantic_codebook_size: int = 4096
    residual_codebook_size: int = 1024
    residual_codebooks: int = 9  # codes 1..9
    codebook_dim: int = 8
    latent_dim: int = 1024
    transformer_layers: int = 8
    transformer_heads: int = 16
    transformer_ffn: int = 3072
    transformer_window: int = 128
    upsample_factors: tuple[int, ...] = (2, 2)
    decoder_dim: int = 1536
    decoder_rates: tuple[int, ...] = (8, 8, 4, 2)

    @property
    def frame_samples(self) -> int:
        n = 1
        for r in self.upsample_factors + self.decoder_rates:
            n *= r
        return n


@dataclass(frozen=True, slots=True)
class Drama3Config:
    name: str = "drama3"
    backbone: BackboneConfig = field(default_factory=BackboneConfig)
    tower: TowerConfig = field(default_factory=TowerConfig)
    codec: CodecConfig = field(default_factory=CodecConfig)
    num_codebooks: int = 10  # code 0 = semantic (= main token - semantic_begin), codes 1..9 residual
    codebook_size: int = 4096  # semantic band size
    text_vocab_size: int = 248320  # ids below this are text/special tokens; the semantic band follows
    max_context_rows: int = 16384
    max_prompt_rows: int = 8192
    max_new_frames: int = 2048
    max_reference_seconds: float = 60.0
    num_speakers: int = 16

    def __post_init__(self) -> None:
        assert self.codec.frame_samples == 2048, "Drama 3 frames are 2048 samples (46.4 ms at 44.1 kHz)"
        assert self.codec.semantic_codebook_size == self.codebook_size
        assert self.codec.residual_codebooks == self.num_codebooks - 1
        assert self.codec.residual_codebook_size <= self.tower.head_size
        assert self.tower.num_shared_layers >= 1 and self.num_codebooks >= 2

    def special_token_id(self, token: str) -> int:
        """Structural tokens occupy the last ids of the text vocabulary, in SPECIAL_TOKENS order."""
        return self.text_vocab_size - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index(token)

    @property
    def eos_token_id(self) -> int:
        return self.special_token_id("<|im_end|>")

    @property
    def hidden_size(self) -> int:
        return self.backbone.hidden_size

    @property
    def semantic_begin(self) -> int:
        return self.text_vocab_size

    @property
    def vocab_size(self) -> int:
        return self.text_vocab_size + self.codebook_size

    @property
    def num_tower_layers(self) -> int:
        return self.tower.num_shared_layers + self.num_codebooks - 1

    @property
    def frames_per_second(self) -> float:
        return self.codec.sample_rate / self.codec.frame_samples

    def to_dict(self) -> dict:
        return asdict(self)


def _drama3() -> Drama3Config:
    return Drama3Config()


def _drama3_tiny() -> Drama3Config:
    return Drama3Config(
        name="drama3-tiny",
        backbone=BackboneConfig(
            num_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            rotary_dim=8, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
            linear_value_head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32, fp8_block=16,
        ),
        tower=TowerConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=16, rotary_dim=8,
                          intermediate_size=128, head_size=64),
        codec=CodecConfig(semantic_codebook_size=64, residual_codebook_size=32, codebook_dim=4, latent_dim=32,
                          transformer_layers=2, transformer_heads=2, transformer_ffn=64, transformer_window=16,
                          decoder_dim=48),
        codebook_size=64,
        text_vocab_size=512,
        max_context_rows=2048,
    )


CONFIGS = {"drama3": _drama3, "drama3-tiny": _drama3_tiny}


def get_config(name: str) -> Drama3Config:
    if name not in CONFIGS:
        raise KeyError(f"unknown model config {name!r}; known: {sorted(CONFIGS)}")
    return CONFIGS[name]()
