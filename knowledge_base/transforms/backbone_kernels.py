"""What the backbone-kernel transforms (triton_backbone_attention, triton_backbone_deltanet) add to
cuda_graph_frame's decode_step.py in common: the switch that sends a mixer to its kernels on CUDA, and on CPU
under the Triton interpreter (the tests). Whichever of them comes first adds it; the other finds it there.
"""
from __future__ import annotations

from .base import Files, Patch, replace_once

STEP = "decode_step.py"
SWITCH = "_TRITON_ON_CPU"
_IMPORTS = "from __future__ import annotations\n\nfrom collections.abc import Callable\n"
_ANCHOR = "def _attention_mixer("


def triton_switch(files: Files) -> list[Patch]:
    """Patches defining SWITCH in decode_step.py, unless it is defined there already."""
    if f"\n{SWITCH} = " in files.get(STEP, ""):
        return []
    return [
        replace_once(files, STEP, _IMPORTS, _IMPORTS.replace("from collections", "import os\nfrom collections")),
        replace_once(files, STEP, _ANCHOR, f'''\
# Triton is imported only where it can run: on CUDA, or on CPU under the Triton interpreter (the tests)
{SWITCH} = os.environ.get("TRITON_INTERPRET") == "1"


''' + _ANCHOR),
    ]
