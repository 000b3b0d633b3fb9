"""The LLM prompts rendered from swarm/prompts/*.md carry everything the agent needs."""
from __future__ import annotations

import pytest
from engine_copies import transformed, with_prerequisites

from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.renew import template_version
from swarm.agents.prompt import (
    PROMPTS_DIR,
    PromptTooLong,
    proposal_prompt,
    repair_prompt,
    system_prompt,
)
from swarm.proposal import Lesson


def test_system_prompt_states_the_contract_features_and_edit_format():
    text = system_prompt()
    for needle in ("reference_runtime/api.py", "teacher forcing", "fp8_moe", "gated_deltanet", "gated_attention",
                   "codebook_mtp", "dac_codec", "<<<<<<< SEARCH", ">>>>>>> REPLACE",
                   "Never special-case the benchmark"):
        assert needle in text


def test_proposal_prompt_carries_the_context(context):
    context = context.model_copy(update={
        "failures": ["rope_tables() (mismatch): logits differ at frame 3"],
        "lessons": [Lesson(feature="fp8_moe", outcome="worked", summary="dequantise at build", evidence="1.06x"),
                    Lesson(feature="codec", outcome="failed", summary="fp16 codec drifts")],
        "applied_transforms": ["fp8_dequant_at_build", "triton_deltanet"], "gpu": "h200", "device": "cuda",
        "iteration": 4, "slot": 1})
    text = proposal_prompt(context)
    for needle in ("drama3-cpu", "drama3-tiny", "cuda (h200)", "frames/s p50 40.0", "speedup >= 1.5",
                   "logits differ at frame 3", "### fp8_moe\n- [worked] dequantise at build (evidence: 1.06x)",
                   "### codec\n- [failed] fp16 codec drifts", "- fp8_dequant_at_build", "### moe.py\n````python\n",
                   "for e in experts:", "iteration 4, proposal slot 1", "- `cuda_graph_backbone` (decode_graph; ",
                   "- triton_deltanet: its tuning constants are BLOCK_V in triton_deltanet_params.py "
                   "(tried: [16, 32, 64])",
                   "(fp8_moe; block_n in [16, 8, 32]; num_warps in [4, 2, 8]; down_slots in [8, 1, 2]; "
                   "proven on this device)"):
        assert needle in text
    assert "- `fp8_dequant_at_build`" not in text  # already in the lineage
    assert "$" not in text.replace("$edit_format", "")


def test_proposal_prompt_shows_the_diff_that_renews_a_stale_kernel(context, reference_run):
    tower = TRANSFORMS["triton_tower"]
    files = transformed(reference_run.files, *with_prerequisites(tower.name, next(tower.variants())))
    stale = files | {"triton_tower.py": files["triton_tower.py"].replace("RESIDUAL_", "OLD_")}
    applied = ["triton_tower"]
    assert proposal_prompt(context.model_copy(update={"parent_files": files, "applied_transforms": applied})) \
        .count("today's version") == 0
    text = proposal_prompt(context.model_copy(update={"parent_files": stale, "applied_transforms": applied}))
    renewals = text.split("## Kernels in this engine older")[1].split("## Known optimisations")[0]
    assert f"### `triton_tower`: today's version {template_version(tower)}" in renewals
    assert "--- a/triton_tower.py\n+++ b/triton_tower.py\n" in renewals
    assert any(line.startswith("-") and "OLD_" in line for line in renewals.splitlines())
    assert any(line.startswith("+") and "RESIDUAL_" in line for line in renewals.splitlines())


def test_a_prompt_budget_shows_the_profiled_files_first_and_names_the_rest(context):
    files = {"fused_moe.py": "def _gate_up_kernel(x):\n" + "    x = x + 1\n" * 400,
             "codec.py": "def decode_frames(x):\n" + "    x = x * 2\n" * 300, "moe.py": context.parent_files["moe.py"]}
    context = context.model_copy(update={"parent_files": files, "parent_figures": (
        "Where the parent's time goes per frame:\n    0.930     40.0  _gate_up_kernel\n    0.100  1.0  aten::mm")})
    full = proposal_prompt(context)
    assert proposal_prompt(context, max_chars=len(full)) == full  # it fits: nothing left out
    bare = len(proposal_prompt(context.model_copy(update={"parent_files": {}})))
    text = proposal_prompt(context, max_chars=bare + len(files["fused_moe.py"]) + 600)
    assert len(text) <= bare + len(files["fused_moe.py"]) + 600
    assert "### fused_moe.py" in text and "### moe.py" in text and "### codec.py" not in text  # hot, then small
    assert "Not shown, for this model's context window: codec.py (301 lines)." in text
    with pytest.raises(PromptTooLong, match="no engine file shown"):
        proposal_prompt(context, max_chars=bare)


def test_repair_prompt_quotes_the_error_and_restates_the_format():
    text = repair_prompt("edit block 2 (moe.py): SEARCH does not match")
    assert "edit block 2 (moe.py)" in text and "<<<<<<< SEARCH" in text


def test_every_template_is_used():
    assert {p.stem for p in PROMPTS_DIR.glob("*.md")} == {"system", "proposal", "repair", "edit_format"}
