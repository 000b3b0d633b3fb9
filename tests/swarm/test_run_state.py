"""The lineage a kept engine's proposals record, as agents see it."""
from __future__ import annotations

import json

from knowledge_base import (REFERENCE_ID, CandidateRecord, CandidateState, EngineKey, Figures, KeptEngine,
                            KnowledgeStore, RunRecord)
from swarm.run_state import ParentEngine, RunView, lineage_transforms


def test_a_renewal_or_retune_does_not_list_its_transform_twice(tmp_path):
    kb = KnowledgeStore(tmp_path / "kb.sqlite")
    key = EngineKey("arch", "drama3-tiny", "cpu", "", "2.13.0", "", "")
    run = kb.create_run(RunRecord(id=kb.next_run_id("t"), target_name="t", target_json="{}",
                                  baseline_request="reference", baseline_id=REFERENCE_ID, baseline_commit="c0",
                                  engine_key=key, secret=1))
    parent = REFERENCE_ID
    for iteration, transforms in enumerate((["cuda_graph_frame", "triton_tower"], ["triton_tower"],
                                            ["triton_sampling"]), start=1):
        cid = f"{run.id}.i{iteration:03d}.s00"
        kb.add_candidate(CandidateRecord(
            id=cid, run_id=run.id, iteration=iteration, slot=0, parent_id=parent, parent_commit="c", agent="a",
            title="t", rationale="r", proposal_json=json.dumps({"transforms": transforms}), git_commit="c",
            state=CandidateState.PROPOSED))
        parent = cid
    assert lineage_transforms(kb, parent) == ["cuda_graph_frame", "triton_tower", "triton_sampling"]


def test_a_kept_child_comes_after_its_parent_even_when_its_chained_frames_per_s_is_lower():
    """A time-to-first-audio win keeps frames/s within noise (0.995x here): its chained figure sits under its
    parent's, yet it is the next parent; among engines with no kept child the fastest chain still wins."""
    key = EngineKey("arch", "drama3-tiny", "cpu", "", "2.13.0", "", "")
    run = RunRecord(id="t-001", target_name="t", target_json="{}", baseline_request="reference",
                    baseline_id=REFERENCE_ID, baseline_commit="c0", engine_key=key, secret=1)
    chain = {"t-001.i001.s00": (REFERENCE_ID, 1.20), "t-001.i002.s00": ("t-001.i001.s00", 1.194),
             "t-001.i002.s01": ("t-001.i001.s00", 1.18)}
    candidates = [CandidateRecord(id=cid, run_id=run.id, iteration=int(cid[7:10]), slot=int(cid[-2:]),
                                  parent_id=parent, parent_commit="c", agent="a", title="t", rationale="r",
                                  proposal_json="{}", git_commit=cid, state=CandidateState.DONE)
                  for cid, (parent, _) in chain.items()]
    kept = [KeptEngine(id=cid, run_id=run.id, parent_id=parent, git_commit=cid, key=key, figures=Figures(),
                       speedup_vs_reference=chained) for cid, (parent, chained) in chain.items()]
    view = RunView(run=run, baseline=ParentEngine(REFERENCE_ID, "c0", Figures(), 1.0), candidates=candidates,
                   verdicts={}, kept=kept)
    assert view.parent_for(2).id == "t-001.i001.s00"
    assert view.best().id == "t-001.i002.s00"
