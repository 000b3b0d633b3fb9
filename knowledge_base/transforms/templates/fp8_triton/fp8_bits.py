"""float8_e4m3fn bytes -> float32 inside Triton kernels: the sm_90 conversion instruction on CUDA, and a decode
from the bits under TRITON_INTERPRET=1 (the CPU tests), where the interpreter has no fp8 type."""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fp8_e4m3(bits, NATIVE_FP8: tl.constexpr):
    """uint8 bits of float8_e4m3fn -> float32 (exact: every e4m3 value is a float32)."""
    if NATIVE_FP8:
        return bits.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    b = bits.to(tl.int32)
    exp = (b >> 3) & 15
    man = b & 7
    normal = (((exp + 120) << 23) | (man << 20)).to(tl.float32, bitcast=True)  # 2^(exp-7) * (1 + man/8)
    value = tl.where(exp == 0, man.to(tl.float32) * 0.001953125, normal)  # subnormals: man/8 * 2^-6
    return tl.where((b & 128) != 0, -value, value)
