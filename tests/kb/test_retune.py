"""Retunes and renewals of an applied transform: every tunable transform writes its knobs as the constants a
retune edits, a retune changes that one line, and a params file a later transform retired offers none; a renewal
brings stale kernel files and tuning constants to what applying the transform today writes."""
from __future__ import annotations

from pathlib import Path

from candidates.repo import engine_files
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.base import literal
from knowledge_base.transforms.renew import renewal, template_version
from knowledge_base.transforms.retune import retunes
from swarm.edits import apply_edits, patch_edits

REFERENCE = Path(__file__).resolve().parents[2] / "reference_runtime" / "model"
# every transform with knobs, each after its prerequisites (triton_prefill_route after cuda_graph_prefill, whose
# program it hands the valid row count that prefix_moe_cache builds on); triton_moe_fused after the others: it
# retires triton_fp8_moe's file
STACK = ["cuda_graph_frame", "triton_fp8_moe", "triton_prefill_moe", "triton_deltanet", "cuda_graph_prefill",
         "triton_prefill_route", "triton_tower", "triton_sampling", "triton_backbone_deltanet", "triton_moe_fused",
         "triton_backbone_attention", "triton_moe_block", "triton_code_heads", "triton_frame_glue",
         "pipelined_frames", "prefill_row_ladder", "prefix_moe_cache", "prefix_moe_slots", "triton_deltanet_prep",
         "triton_deltanet_chunks"]


def _apply(files: dict[str, str], patches) -> dict[str, str]:
    return apply_edits(files, patch_edits(patches))


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
        assert len(offered) == sum(len(t.space[p]) - 1 for p in t.knobs.notes), name  # every other value, once
        path = t.knobs.path
        for param in t.knobs.notes:
            assert f"\n{t.knobs.constant(param)} = {literal(params[param])}" in "\n" + files[path], (name, param)
        first = offered[0]
        changed = _apply(files, [first.patch])
        diff = [(a, b) for a, b in zip(files[path].splitlines(), changed[path].splitlines()) if a != b]
        assert len(diff) == 1 and diff[0][1].startswith(f"{t.knobs.constant(first.param)} = {literal(first.value)}")
        again = {(r.param, r.value) for r in retunes(t, changed)}
        assert (first.param, first.value) not in again and (first.param, params[first.param]) in again
    assert retunes(TRANSFORMS["triton_fp8_moe"], files) == []  # triton_moe_fused retired its params file


def _stacked() -> dict[str, str]:
    files = engine_files(REFERENCE)
    for name in STACK:
        files = _apply(files, TRANSFORMS[name].apply(files, next(TRANSFORMS[name].variants())))
    return files


def test_no_later_transform_edits_a_renewable_transforms_files_so_a_fresh_stack_needs_no_renewal():
    files = _stacked()
    renewable = [t for t in TRANSFORMS.values() if t.templates]
    assert {t.name for t in renewable} <= set(STACK)
    assert [t.name for t in renewable if renewal(t, files) is not None] == []


def test_a_renewal_brings_stale_kernels_and_constants_to_todays_templates_and_defaults():
    files = _stacked()
    tower = TRANSFORMS["triton_tower"]
    today, today_params = files["triton_tower.py"], files["triton_tower_params.py"]
    # an engine from before the residual GEMV tiles: an older kernel file, fewer constants, one of them retuned
    files["triton_tower.py"] = today.replace("RESIDUAL_", "OLD_")
    files["triton_tower_params.py"] = '''"""Parameters the triton_tower transform was applied with."""
BLOCK_N = 16  # output rows per GEMV program
BLOCK_K = 512  # input columns per unrolled GEMV chunk
ATTN_ROWS = 32  # KV rows per attention tile (a tl.dot operand: >= 16)
SPLIT_ROWS = 128  # span rows per attention program (at most MAX_SPLITS per kv head)
NUM_WARPS = 4
'''
    found = renewal(tower, files)
    assert found is not None and found.version == template_version(tower) and len(found.version) == 8
    renewed = _apply(files, found.patches)
    assert renewed["triton_tower.py"] == today and renewed["triton_tower_params.py"] == today_params
    assert renewal(tower, renewed) is None
    assert {p.path for p in found.patches} == {"triton_tower.py", "triton_tower_params.py"}  # nothing else changes
    del files["triton_tower_params.py"]
    assert renewal(tower, files) is None  # not applied (or retired): nothing to renew


def test_a_transform_importing_another_ones_stale_file_renews_only_after_it():
    """triton_moe_block's kernel imports triton_tower's GEMV helpers: renewing it alone on an engine whose
    triton_tower.py is older would bring a kernel file that fails to import (and a new triton_tower.py would read
    constants its old params file may lack), so it renews only once triton_tower's renewal has brought that file."""
    files = _stacked()
    today = dict(files)
    block, tower = TRANSFORMS["triton_moe_block"], TRANSFORMS["triton_tower"]
    files["triton_tower.py"] = today["triton_tower.py"].replace("RESIDUAL_", "OLD_")
    files["moe_block.py"] = today["moe_block.py"] + "# an older version\n"
    assert renewal(block, files) is None
    renewed = _apply(files, renewal(tower, files).patches)
    found = renewal(block, renewed)
    assert found is not None and {p.path for p in found.patches} == {"moe_block.py"}
    assert _apply(renewed, found.patches) == today
