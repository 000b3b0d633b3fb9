"""The lineage a kept engine's proposals record, as agents see it."""
from __future__ import annotations

import json

from knowledge_base import REFERENCE_ID, CandidateRecord, CandidateState, EngineKey, KnowledgeStore, RunRecord
from swarm.run_state import lineage_transforms


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
