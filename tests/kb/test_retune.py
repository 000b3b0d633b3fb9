"""Retunes: every tunable transform writes its knobs as the constants a retune edits, a retune changes that one
line, and a params file a later transform retired offers none."""
from __future__ import annotations

from pathlib import Path

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.retune import literal, retunes
from swarm.edits import apply_edits
from swarm.proposal import FileEdit

REFERENCE = Path(__file__).resolve().parents[2] / "reference_runtime" / "model"
# every transform with knobs, each after its prerequisites; triton_moe_fused last: it retires triton_fp8_moe's file
STACK = ["cuda_graph_frame", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet", "triton_tower",
         "triton_sampling", "triton_backbone_deltanet", "triton_moe_fused"]


def _apply(files: dict[str, str], patches) -> dict[str, str]:
    return apply_edits(files, [FileEdit(path=p.path, search=p.search, replace=p.replace) for p in patches])


def test_the_stack_covers_every_tunable_transform():
    assert {n for n, t in TRANSFORMS.items() if t.knobs} <= set(STACK)


def test_knobs_are_the_constants_the_transform_writes_and_a_retune_edits_one_line():
    files = engine_files(REFERENCE)
    for name in STACK:
        t = TRANSFORMS[name]
        params = next(t.variants())
        files = _apply(files, t.apply(files, params))
        if not t.knobs:  # a prerequisite only
            continue
        offered = retunes(t, files)
        assert len(offered) == sum(len(t.space[p]) - 1 for p in t.knobs), name  # every other value, once
        for param, (path, constant) in t.knobs.items():
            assert f"\n{constant} = {literal(params[param])}" in "\n" + files[path], (name, param)
        first = offered[0]
        changed = _apply(files, [first.patch])
        path = t.knobs[first.param][0]
        diff = [(a, b) for a, b in zip(files[path].splitlines(), changed[path].splitlines()) if a != b]
        assert len(diff) == 1 and diff[0][1].startswith(f"{t.knobs[first.param][1]} = {literal(first.value)}")
        again = {(r.param, r.value) for r in retunes(t, changed)}
        assert (first.param, first.value) not in again and (first.param, params[first.param]) in again
    assert retunes(TRANSFORMS["triton_fp8_moe"], files) == []  # triton_moe_fused retired its params file
