"""The AST backstop: the reference is clean, timer patching and harness imports decide, the rest is evidence."""
from __future__ import annotations

import pytest

from evaluator.sandbox import REFERENCE_DIR
from evaluator.static_scan import scan


def _scan(tmp_path, source: str):
    (tmp_path / "mod.py").write_text(source)
    return scan(tmp_path)


def test_reference_is_clean():
    assert [f for f in scan(REFERENCE_DIR) if f.tampering] == []


@pytest.mark.parametrize("source", [
    "import time\ntime.perf_counter = lambda: 0.0\n",
    "import torch\ntorch.cuda.synchronize = lambda *a: None\n",
    "import torch.cuda as tc\ntc.Event.elapsed_time = lambda self, other: 0.001\n",
    "import time\nsetattr(time, 'perf_counter', lambda: 0.0)\n",
    "from unittest import mock\nmock.patch('time.perf_counter', return_value=0.0).start()\n",
    "from evaluator import worker\n",
    "import evaluator.benchmark\n",
])
def test_tampering_decides(tmp_path, source):
    findings = _scan(tmp_path, source)
    assert any(f.tampering for f in findings), findings
    assert findings[0].path == "mod.py" and findings[0].line >= 1


@pytest.mark.parametrize("source, words", [
    ("import gc\nobjs = gc.get_objects()\n", "heap"),
    ("import threading\n", "threads"),
    ("import ctypes\n", "ctypes"),
    ("import os\nos.fork()\n", "forks"),
    ("data = open('/etc/passwd').read()\n", "outside the package"),
    ("from pathlib import Path\nPath('../../secrets')\n", "outside the package"),
])
def test_suspicious_but_not_deciding(tmp_path, source, words):
    findings = _scan(tmp_path, source)
    assert findings and not any(f.tampering for f in findings)
    assert any(words in f.message for f in findings)
