"""The first candidate of the next H200 lease, from the state the last one packed (docs/measurements/
2026-12-05_h200_s22_swarm_home.tgz, which `scripts/device_swarm.sh` resumes): on the best kept engine, while time
to first audio misses, the offline proposer's leap stacks every transform proven on CUDA since that engine was kept
whose prior expects a gain, the prefill's and the codec's first, and its edits apply to the engine's files. A lease
spent on a leap that does not apply would be lost; this is checked where no GPU is needed."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from candidates.repo import EngineRepo
from knowledge_base import KnowledgeStore
from knowledge_base.transforms import TRANSFORMS
from knowledge_base.transforms.base import FIRST_AUDIO_AIM
from swarm.agents import offline
from swarm.agents.offline import OfflineAgent
from swarm.edits import apply_edits
from swarm.proposal import ProposalContext
from swarm.run_state import lineage_transforms

STATE = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "2026-12-05_h200_s22_swarm_home.tgz"
PARENT = "drama3-h200-lease-003.i012.s00"  # the run's best kept engine, which the lease's next iteration builds on


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    with tarfile.open(STATE) as packed:
        packed.extractall(root, filter="data")
    home = root / "swarm_home"
    kb = KnowledgeStore(home / "kb.sqlite")
    try:
        return EngineRepo(home / "engines").files(kb.kept_engine(PARENT).git_commit), lineage_transforms(kb, PARENT)
    finally:
        kb.close()


def _propose(kept, aims: list[str]):
    files, lineage = kept
    return OfflineAgent("o").propose(ProposalContext(
        target_name="drama3-h200-lease", model_config_name="drama3", device="cuda", gpu="h200", parent_id=PARENT,
        parent_files=files, parent_figures="", acceptance="", unmet_aims=aims, applied_transforms=lineage))


def test_the_leap_stacks_what_was_proven_since_and_applies(kept):
    files, lineage = kept
    aims = [FIRST_AUDIO_AIM, "frames_per_s"]
    leap = _propose(kept, aims)
    assert leap.title.startswith(offline.LEAP)
    since = {name for name, t in TRANSFORMS.items()
             if "cuda" in t.proven and name not in lineage and t.prior("cuda", frozenset(aims)) > 1}
    assert "prefix_moe_slots" not in since  # proven, but slower in the evaluator's trials, whose voices are fresh
    assert {"triton_deltanet_chunks", "codec_upsample_channels_last", "prefill_first_frame"} <= since
    assert set(leap.transforms) == since | {"triton_prefill_moe"}  # that one renewed, its kernels being older
    changed = apply_edits(files, leap.edits)
    assert "chunked_delta_rule.py" in changed and 'PRECISION = "tf32"' in changed["chunked_delta_rule_params.py"]
    # with time to first audio met, the prefill's transforms (first-audio priors only) stay out
    throughput = _propose(kept, ["frames_per_s"])
    assert "triton_deltanet_chunks" not in throughput.transforms and "codec_upsample_channels_last" in \
        throughput.transforms
