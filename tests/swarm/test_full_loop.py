"""The real thing on CPU: `swarm run` on drama3_cpu with the offline proposer and the real evaluator, killed
with SIGKILL mid-evaluation and resumed; it must evaluate nothing twice and, where the host is quiet enough to
tell, keep a correct, faster engine."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from evaluator.verdict import Status, Verdict
from knowledge_base import KnowledgeStore, RunState
from swarm.paths import kb_path, run_dir, swarm_home
from targets import load_target

ROOT = Path(__file__).resolve().parents[2]
# The offline proposer's first leap measured 1.17-1.23x on drama3_cpu (docs/benchmarks.md); on 30 pairs its CI's
# lower bound sits about 5% under that, so a run whose A/A band is wider than this cannot be asked to keep it.
NOISY_HOST_BAND = 1.10


def _events(run_id: str) -> list[dict]:
    path = run_dir(run_id) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _swarm(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "swarm", *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_swarm_run_keeps_a_faster_engine_and_survives_kill_9(tmp_path):
    data = load_target(ROOT / "targets" / "drama3_cpu.yaml").model_dump(mode="json")
    # The demo target, cut to what two CPU cores evaluate in about a minute per candidate. Two iterations of 12
    # paired trials (up to 36 where they spread) rather than four of 6: with 6 pairs the A/A band alone reached
    # 1.24x on a noisy 2-core machine, above the 1.1-1.2x the offline proposer's first stacks measure.
    data["benchmark"] |= {"prompts": data["benchmark"]["prompts"][:1], "frames": 12, "warm_trials": 12,
                          "warmup_trials": 1}
    data["tolerances"] |= {"prompts": 1, "frames": 6}
    data |= {"agents": [{"provider": "offline", "count": 1}], "candidates_per_iteration": 2, "acceptance": {},
             "budget": {"iterations": 2, "wall_minutes": 20}}
    target_file = tmp_path / "cpu.yaml"
    target_file.write_text(yaml.safe_dump(data))
    run_id = f"{data['name']}-001"

    proc = _swarm("run", str(target_file))
    deadline = time.monotonic() + 300
    while sum(e["kind"] == "evaluation_started" for e in _events(run_id)) < 2 or \
            not any(e["kind"] == "evaluation_finished" for e in _events(run_id)):
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "no evaluation finished in time"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()

    resumed = _swarm("run", str(target_file), "--resume", run_id)
    output, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, output

    events = _events(run_id)
    finished = Counter(e["candidate_id"] for e in events if e["kind"] == "evaluation_finished")
    proposed = Counter(e["candidate_id"] for e in events if e["kind"] == "candidate_proposed")
    assert set(finished.values()) == {1} and set(proposed.values()) == {1}
    kb = KnowledgeStore(kb_path())
    assert kb.run(run_id).state is RunState.FINISHED
    kept, records = kb.kept_engines(run_id), kb.verdicts(run_id)
    listing = [(v.candidate_id, v.status, v.summary) for v in records]
    verdicts = [Verdict.model_validate_json(v.verdict_json) for v in records if v.verdict_json]
    band = max((v.comparison.threshold for v in verdicts if v.comparison and v.comparison.calibrated), default=0)
    if not kept and band > NOISY_HOST_BAND:
        pytest.skip(f"kill -9 and resume held, but this host's A/A band ({band:.3f}) is wider than the offline "
                    f"proposer's first stacks measure, so keeping none was the evaluator's honest answer: {listing}")
    assert kept, f"no engine kept: {listing}"
    assert f"swarm review {run_id}" in output
    verdict = Verdict.model_validate_json(kb.verdict(kept[0].id).verdict_json)
    assert verdict.status is Status.PASS and verdict.comparison.ci_low > verdict.comparison.threshold
    assert (swarm_home() / "engines" / "refs" / "tags" / "kept" / kept[0].id).exists()
