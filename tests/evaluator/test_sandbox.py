"""What the worker sandbox actually enforces on this machine, seen from inside a probing candidate, plus the
judge's channel refusing forged or oversized messages."""
from __future__ import annotations

import io
import json
import os
import re
import time

import pytest
import torch

from evaluator import Status, evaluate
from evaluator.channel import HEADER, JudgeChannel, ProtocolError
from evaluator.sandbox import REFERENCE_DIR, REPO_ROOT
from tests.evaluator.candidate_factory import build_engine_body, make_candidate
from tests.processes import alive

PROBE = '''
import getpass, json, os, socket, subprocess
from pathlib import Path
import torch
facts = {"uid": os.getuid(), "env": sorted(os.environ), "home": os.environ.get("HOME"),
         "threads": torch.get_num_threads()}
try:
    facts["user"] = getpass.getuser()  # inductor's and triton's cache paths ask for it
except (KeyError, OSError) as e:
    facts["user"] = type(e).__name__
try:
    socket.create_connection(("10.255.255.1", 80), timeout=1)
    facts["network"] = "connected"
except OSError as e:
    facts["network"] = type(e).__name__
facts["interfaces"] = [name for _, name in socket.if_nameindex()]
for key, path in (("repo", REPO / "h3a_probe_file"), ("package", Path(__file__).parent / "probe_file"),
                  ("tmp", Path("/tmp") / NAME)):
    try:
        path.write_text("x")
        facts[key] = "written"
    except OSError as e:
        facts[key] = type(e).__name__
facts["child"] = subprocess.Popen(["sleep", "300"], start_new_session=True).pid
raise RuntimeError("PROBE" + json.dumps(facts) + "PROBE")
'''


@pytest.fixture(scope="module")
def probe(tiny_target, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probe")
    name = f"h3a_probe_{os.getpid()}"
    body = PROBE.replace("REPO", f"Path({str(REPO_ROOT)!r})").replace("NAME", repr(name))
    candidate = make_candidate(tmp, files=build_engine_body(body))
    os.environ["ANTHROPIC_API_KEY"] = "sk-must-not-leak"
    try:
        verdict = evaluate(candidate, tiny_target, baseline_dir=REFERENCE_DIR, work_dir=tmp / "work")
    finally:
        del os.environ["ANTHROPIC_API_KEY"]
    assert verdict.status == Status.BUILD_ERROR, verdict.summary
    facts = json.loads(re.search("PROBE(.*)PROBE", verdict.summary).group(1))
    return facts, name, [e.message for e in verdict.evidence if e.check == "sandbox"]


def test_environment_is_scrubbed(probe):
    facts, _, _ = probe
    assert "ANTHROPIC_API_KEY" not in facts["env"] and "OPENAI_API_KEY" not in facts["env"]
    assert "PYTHONPATH" in facts["env"]
    assert "CUBLAS_WORKSPACE_CONFIG" in facts["env"]  # reproducible cuBLAS with several streams


def test_worker_runs_the_targets_cpu_threads(probe, tiny_target):
    facts, _, _ = probe
    assert tiny_target.hardware.cpu_threads == 1 and facts["threads"] == 1


def test_package_is_read_only_and_repo_unwritable(probe):
    facts, _, _ = probe
    assert facts["package"] != "written"
    assert not (REPO_ROOT / "h3a_probe_file").exists()
    if os.geteuid() == 0:
        assert facts["repo"] != "written"


@pytest.mark.skipif(os.geteuid() != 0, reason="confinement needs root; the verdict notes say so instead")
def test_root_judge_confines_the_worker(probe):
    facts, name, notes = probe
    assert facts["uid"] != 0 and facts["user"] == "swarm-worker"
    assert facts["network"] != "connected" and facts["interfaces"] == ["lo"]
    if str(REPO_ROOT).startswith("/tmp/"):  # the repo must stay importable, so the host /tmp stays visible,
        assert any("kept the host /tmp" in n for n in notes)
        assert facts["tmp"] != "written"  # but read-only like every host mount; TMPDIR is the private tmp
    else:
        assert facts["tmp"] == "written"
        assert facts["home"] == "/tmp" and not os.path.exists(f"/tmp/{name}")  # /tmp was its private dir


def test_escaped_child_is_killed(probe):
    facts, _, _ = probe
    deadline = time.time() + 5
    while time.time() < deadline and alive(facts["child"]):
        time.sleep(0.1)
    assert not alive(facts["child"]) or os.geteuid() != 0


def _channel_with(payload: bytes) -> JudgeChannel:
    r, w = os.pipe()
    os.write(w, HEADER.pack(len(payload)) + payload)
    return JudgeChannel(r, w)


def _saved(obj: object) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("payload", [b"not a torch payload", _saved({"kind": "x", "evil": _Exploit()}),
                                     _saved(["no", "kind"])])
def test_channel_refuses_forged_messages(payload):
    with pytest.raises(ProtocolError):
        _channel_with(payload).recv(time.perf_counter() + 5, lambda: None)


def test_channel_refuses_oversized_messages():
    r, w = os.pipe()
    os.write(w, HEADER.pack(1 << 40))
    with pytest.raises(ProtocolError, match="cap"):
        JudgeChannel(r, w).recv(time.perf_counter() + 5, lambda: None)


def test_closing_a_channel_twice_leaves_files_opened_since_alone():
    channel = JudgeChannel(*os.pipe())
    channel.close()
    r, w = os.pipe()  # the lowest free numbers: the ones the channel just gave back
    try:
        channel.close()  # a worker killed on failure is killed again when its pool closes
        os.write(w, b"x")
        assert os.read(r, 1) == b"x"
    finally:
        os.close(r)
        os.close(w)
