"""Are codec_overlap's streams reproducible? drama3-mid on CUDA: two engines of the same overlapped stack and one
with each codec transform stream the same seeded request (first chunk 1 frame, 32 frames of left context); prints,
against the first engine, the first frame that differs and each chunk's largest audio difference. Run it with and
without CUBLAS_WORKSPACE_CONFIG=:4096:8 to tell cuBLAS's multi-stream choices from a race in the transform.
    python3 scripts/codec_stream_repeat.py [FRAMES]
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests" / "gpu")]
from gpu_engines import load_transformed, mid_config  # noqa: E402
from test_gpu_codec_overlap import OVERLAPPED  # noqa: E402

from knowledge_base.transforms.codec_first_window_queued import codec_first_window_queued  # noqa: E402
from knowledge_base.transforms.codec_windows_ahead import codec_windows_ahead  # noqa: E402
from reference_runtime.api import StreamSchedule, TTSRequest  # noqa: E402
from reference_runtime.weights import init_weights  # noqa: E402


def main(frames: int) -> None:
    root = Path(tempfile.mkdtemp())
    sys.path.insert(0, str(root))
    config, device = mid_config(), torch.device("cuda")
    weights = init_weights(config, seed=0, device=device)
    stacks = {"overlapped": OVERLAPPED, "overlapped again": OVERLAPPED,
              "first window queued": [*OVERLAPPED, (codec_first_window_queued, {})],
              "windows ahead": [*OVERLAPPED, (codec_windows_ahead, {})]}
    engines = {name: load_transformed(steps, root).build_engine(config, weights, device)
               for name, steps in stacks.items()}
    request = TTSRequest(text="Hello there, this is a streamed test.", max_frames=frames, ignore_eos=True, seed=5)
    schedule = StreamSchedule(first_chunk_frames=1, overlap_frames=32)
    chunks = {}
    for _ in range(2):  # the first streams capture the graphs
        for name, engine in engines.items():
            chunks[name] = list(engine.stream(request, schedule))
            torch.cuda.synchronize()
    print(f"CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG', '(unset)')}, {frames} frames")
    want = chunks["overlapped"]
    again = list(engines["overlapped"].stream(request, schedule))  # the same engine, its graphs replayed
    same = " ".join(f"{(g.audio - w.audio).abs().max().item():.3f}" for g, w in zip(again, want))
    equal = all(torch.equal(g.frames, w.frames) for g, w in zip(again, want))
    print(f"  {'same engine again':20s} frames equal {equal}; chunks' max |audio diff| {same}")
    codes = torch.cat([c.frames for c in want])[:, 1:].T.contiguous()
    decodes = [engines["overlapped"].decode_audio(codes) for _ in range(4)]  # one stream, no codec beside frames
    print(f"  decode_audio x4 of the {codes.shape[1]} frames: max |diff| to the first "
          + " ".join(f"{(d - decodes[0]).abs().max().item():.3f}" for d in decodes[1:]))
    for name, got in chunks.items():
        if name == "overlapped":
            continue
        a, b = torch.cat([c.frames for c in want]), torch.cat([c.frames for c in got])
        rows = (a != b).any(dim=1).nonzero()
        first = "none" if len(rows) == 0 else int(rows[0])
        audio = " ".join(f"{(g.audio - w.audio).abs().max().item():.3f}" for g, w in zip(got, want))
        print(f"  {name:20s} first differing frame {first}; chunks' max |audio diff| {audio}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
