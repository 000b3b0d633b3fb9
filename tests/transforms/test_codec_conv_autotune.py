"""codec_conv_autotune on CPU: it wraps the codec graph's capture, with or without inductor_codec, once, and the
package it writes imports. Capturing runs only on CUDA: the timing is the GPU fast check's."""
from __future__ import annotations

import importlib

import pytest

from candidates.repo import engine_files
from knowledge_base.transforms import NotApplicable
from knowledge_base.transforms.codec_conv_autotune import codec_conv_autotune
from knowledge_base.transforms.cuda_graph_codec import cuda_graph_codec
from knowledge_base.transforms.cuda_graph_frame import cuda_graph_frame
from knowledge_base.transforms.inductor_codec import inductor_codec

from test_cuda_graphs import REFERENCE, assert_applies_once_on_top_of, load, transformed


@pytest.mark.parametrize("codec", [[cuda_graph_codec], [cuda_graph_codec, inductor_codec]],
                         ids=["graphed", "inductor"])
def test_wraps_the_capture_once(codec, tmp_path):
    base = assert_applies_once_on_top_of(codec_conv_autotune, [cuda_graph_frame, *codec])
    files = transformed(base, [codec_conv_autotune])
    assert "benchmark=True" in files["codec_graph.py"]
    importlib.import_module(f"{load(files, tmp_path).__name__}.codec_graph")


def test_needs_the_graphed_codec():
    with pytest.raises(NotApplicable):
        codec_conv_autotune.apply(transformed(engine_files(REFERENCE), [cuda_graph_frame]), {})
