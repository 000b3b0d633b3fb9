"""A Triton kernel launch as one JSON line: what a fresh process without TRITON_INTERPRET needs to import the
kernel again and hand its JITFunction the same arguments. Tensors keep only what Triton specializes a launch on
(the dtype, and whether the address is 16-byte aligned); every other argument keeps its value, so Triton itself
decides what becomes a constexpr, an i32 or an i64, as it would on the GPU."""
from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

Scalar = None | bool | int | float | str


@dataclass(frozen=True, slots=True)
class Pointer:
    """Stands in for a tensor argument: Triton's specialization reads only its dtype and data_ptr."""
    dtype: torch.dtype
    address: int  # the tensor's data_ptr modulo 16: Triton specializes on 16-byte alignment only

    def data_ptr(self) -> int:
        return self.address


@dataclass(frozen=True, slots=True)
class Launch:
    root: str  # the sys.path entry the kernel's module imports from (engine packages live in temp dirs)
    module: str
    name: str
    params: tuple[str, ...]  # the kernel's parameter names, to report its arguments by
    args: tuple[Pointer | Scalar, ...]
    kwargs: dict[str, Pointer | Scalar]  # keyword kernel arguments and launch options (num_warps, num_stages)


def _encode(value: Any) -> dict[str, Any] | Scalar:
    if isinstance(value, torch.Tensor):
        return {"tensor": str(value.dtype).removeprefix("torch."), "address": value.data_ptr() % 16}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"triton_launches cannot record a kernel argument of type {type(value).__name__}")


def _decode(value: dict[str, Any] | Scalar) -> Pointer | Scalar:
    if isinstance(value, dict):
        return Pointer(getattr(torch, value["tensor"]), value["address"])
    return value


def encode_launch(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """fn: the kernel's Python function (what triton.jit wrapped)."""
    module = sys.modules[fn.__module__]
    file = Path(module.__file__)
    root = file.parents[fn.__module__.count(".") + (file.name == "__init__.py")]
    return json.dumps({"root": str(root), "module": fn.__module__, "name": fn.__qualname__,
                       "params": list(inspect.signature(fn).parameters), "args": [_encode(a) for a in args],
                       "kwargs": {k: _encode(v) for k, v in kwargs.items()}}, sort_keys=True)


def decode_launch(line: str) -> Launch:
    d = json.loads(line)
    return Launch(d["root"], d["module"], d["name"], tuple(d["params"]), tuple(_decode(a) for a in d["args"]),
                  {k: _decode(v) for k, v in d["kwargs"].items()})
