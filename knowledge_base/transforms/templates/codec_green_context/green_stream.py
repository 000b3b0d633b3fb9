"""GreenStream: a CUDA stream whose kernels run on a slice of the GPU's SMs (a green context, CUDA driver 12.4+).

A kernel's blocks take whatever SMs are free when it launches and keep them until they retire; a stream's priority
only orders blocks that wait. The codec's convolutions launch enough blocks to fill every SM, so a codec window
beside the frame graphs stalls each frame kernel behind it whatever the priorities. On a green context's stream the
codec gets `sms` SMs at most, and the frames keep the rest.

Made through the driver API (ctypes on libcuda), not torch.cuda.green_contexts, whose interface differs between
torch releases (no stream of its own before 2.12); torch takes the stream as an external one.
"""
from __future__ import annotations

import ctypes

import torch

_SM_RESOURCE = 1  # CU_DEV_RESOURCE_TYPE_SM
_RESOURCE_BYTES = 1024  # a CUdevResource is 144 bytes in CUDA 12's headers: room for the struct to grow
_GREEN_DEFAULT_STREAM = 1  # CU_GREEN_CTX_DEFAULT_STREAM, required by the 12.x drivers
_NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING: no implicit sync with the legacy default stream


class GreenStream:
    """`stream`: a torch stream on `device` limited to `sms` SMs (rounded up to the GPU's partition granularity).
    Keep the object alive while its stream is in use: the green context lives as long as it does."""

    def __init__(self, device: torch.device, sms: int) -> None:
        index = device.index if device.index is not None else torch.cuda.current_device()
        self._cuda = ctypes.CDLL("libcuda.so.1")
        dev = ctypes.c_int()
        self._check("cuDeviceGet", ctypes.byref(dev), index)
        whole, part, rest = (ctypes.create_string_buffer(_RESOURCE_BYTES) for _ in range(3))
        self._check("cuDeviceGetDevResource", dev, whole, _SM_RESOURCE)
        groups = ctypes.c_uint(1)
        self._check("cuDevSmResourceSplitByCount", part, ctypes.byref(groups), whole, rest, 0, sms)
        desc = ctypes.c_void_p()
        self._check("cuDevResourceGenerateDesc", ctypes.byref(desc), part, 1)
        self._context = ctypes.c_void_p()
        self._check("cuGreenCtxCreate", ctypes.byref(self._context), desc, dev, _GREEN_DEFAULT_STREAM)
        handle = ctypes.c_void_p()
        self._check("cuGreenCtxStreamCreate", ctypes.byref(handle), self._context, _NON_BLOCKING, 0)
        self.stream = torch.cuda.ExternalStream(handle.value, device=torch.device("cuda", index))

    def _check(self, function: str, *args) -> None:
        code = getattr(self._cuda, function)(*args)
        if code != 0:
            text = ctypes.c_char_p()
            self._cuda.cuGetErrorString(code, ctypes.byref(text))
            raise RuntimeError(f"{function} failed ({code}: {(text.value or b'?').decode()}): green contexts need "
                               "an NVIDIA driver for CUDA 12.4 or later; without one, leave codec_green_context out")

    def __del__(self) -> None:
        # the stream goes with its context; torch holds no reference to an external stream's handle
        if getattr(self, "_context", None):
            self._cuda.cuGreenCtxDestroy(self._context)
