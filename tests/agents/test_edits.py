"""SEARCH/REPLACE parsing and strict application (swarm/edits.py)."""
from __future__ import annotations

import pytest

from swarm.edits import EditError, apply_edits, check_path, parse_edits
from swarm.proposal import FileEdit

MOE = "def moe(x):\n    out = 0\n    for e in range(8):\n        out += e * x\n    return out\n"
FILES = {"moe.py": MOE, "layers.py": "def norm(x):\n    return x\n"}


def block(path: str, search: str, replace: str) -> str:
    return f"{path}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n"


def test_parse_reads_path_search_and_replace_in_order():
    answer = ("TITLE: vectorise\nSome prose.\n\n" + block("moe.py", "    out = 0\n", "    out = 1\n")
              + "\nmore prose\n```python\n" + block("layers.py", "", "X = 1\n") + "```\n")
    edits = parse_edits(answer)
    assert edits == [FileEdit(path="moe.py", search="    out = 0\n", replace="    out = 1\n"),
                     FileEdit(path="layers.py", search="", replace="X = 1\n")]


def test_parse_accepts_path_above_a_code_fence():
    answer = "`moe.py`\n```python\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```"
    assert parse_edits(answer)[0].path == "moe.py"


@pytest.mark.parametrize("answer, message", [
    ("no edits here", "no edit blocks found"),
    ("moe.py\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n", "block 1: missing the ======= divider"),
    ("moe.py\n<<<<<<< SEARCH\na\n=======\nb\n", "block 1: missing the >>>>>>> REPLACE marker"),
    ("<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n", "block 1: no file path line"),
])
def test_parse_rejects_malformed_answers(answer, message):
    with pytest.raises(EditError, match=message):
        parse_edits(answer)


def test_apply_replaces_exactly_once_and_leaves_input_untouched():
    out = apply_edits(FILES, [FileEdit(path="moe.py", search="    out = 0\n", replace="    out = 1\n")])
    assert "    out = 1\n" in out["moe.py"] and FILES["moe.py"] == MOE and out["layers.py"] == FILES["layers.py"]


def test_apply_chains_blocks_on_one_file():
    out = apply_edits(FILES, [FileEdit(path="moe.py", search="out = 0", replace="acc = 0"),
                              FileEdit(path="moe.py", search="acc = 0", replace="acc = 2")])
    assert "acc = 2" in out["moe.py"]


def test_unmatched_search_names_file_block_and_closest_lines():
    edits = [FileEdit(path="layers.py", search="def norm(x):\n", replace="def norm(x):\n"),
             FileEdit(path="moe.py", search="\tfor e in range(8):\n", replace="")]
    with pytest.raises(EditError) as err:
        apply_edits(FILES, edits)
    message = str(err.value)
    assert "edit block 2 (moe.py)" in message
    assert "    3|     for e in range(8):" in message and "whitespace or indentation" in message


def test_ambiguous_search_is_rejected_with_its_line_numbers():
    files = {"a.py": "x = 1\ny = 2\nx = 1\n"}
    with pytest.raises(EditError, match=r"matches 2 times \(at lines 1, 3\)"):
        apply_edits(files, [FileEdit(path="a.py", search="x = 1\n", replace="x = 3\n")])


def test_empty_search_creates_a_file_but_never_overwrites_one():
    out = apply_edits(FILES, [FileEdit(path="kernels/rope.py", search="", replace="T = 1\n")])
    assert out["kernels/rope.py"] == "T = 1\n"
    with pytest.raises(EditError, match="moe.py exists"):
        apply_edits(FILES, [FileEdit(path="moe.py", search="", replace="T = 1\n")])


def test_a_whole_file_search_with_an_empty_replace_deletes_the_file():
    out = apply_edits(FILES, [FileEdit(path="moe.py", search=FILES["moe.py"], replace="")])
    assert "moe.py" not in out and "moe.py" in FILES
    two = {"a.py": "x = 1\ny = 2\n"}  # an empty REPLACE of a part only removes that part
    assert apply_edits(two, [FileEdit(path="a.py", search="y = 2\n", replace="")]) == {"a.py": "x = 1\n"}
    with pytest.raises(EditError, match="no such file"):  # a deleted file takes no further edit
        apply_edits(FILES, [FileEdit(path="moe.py", search=FILES["moe.py"], replace=""),
                            FileEdit(path="moe.py", search="x", replace="y")])


def test_edit_of_a_missing_file_is_rejected():
    with pytest.raises(EditError, match="no such file in the engine package"):
        apply_edits(FILES, [FileEdit(path="nope.py", search="a", replace="b")])


@pytest.mark.parametrize("path", ["/etc/passwd", "../evaluator/verdict.py", "a/../../x.py", "..", "C:\\x.py",
                                  "~/x.py", ".git/config", "__pycache__/moe.cpython-311.pyc"])
def test_paths_must_stay_inside_the_package(path):
    with pytest.raises(EditError):
        check_path(path)


def test_edit_that_breaks_compilation_is_rejected_with_its_line():
    with pytest.raises(EditError, match=r"moe.py: the edited file does not compile: .* line 3"):
        apply_edits(FILES, [FileEdit(path="moe.py", search="    for e in range(8):\n",
                                     replace="    for e in range(8)\n")])


def test_non_python_files_are_not_compile_checked():
    out = apply_edits(FILES, [FileEdit(path="NOTES.md", search="", replace="def (\n")])
    assert out["NOTES.md"] == "def (\n"
