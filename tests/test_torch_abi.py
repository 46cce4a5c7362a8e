"""c_api/torch_abi.h mirrors torch's C++-only shim headers in C: prove the prototypes still match."""
import os
import re
import shutil
import subprocess

import pytest
import torch.utils.cpp_extension

from conftest import ROOT

HEADER = os.path.join(ROOT, "c_api", "torch_abi.h")
TORCH_INCLUDE = torch.utils.cpp_extension.include_paths()[0]
TORCH_HEADERS = [
    "torch/csrc/inductor/aoti_torch/c/shim.h",
    "torch/csrc/stable/c/shim.h",
]


def compile_cxx(tmp_path, header_path):
    src = tmp_path / "drift.cpp"
    src.write_text("".join(f"#include <{h}>\n" for h in TORCH_HEADERS) + f'#include "{header_path}"\n')
    cxx = shutil.which("g++") or shutil.which("c++")
    return subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-DUSE_CUDA", f"-I{TORCH_INCLUDE}", str(src)],
                          capture_output=True, text=True)


def declared_functions(text):
    return re.findall(r"^\s*(?:AOTITorchError|uint64_t|int32_t|void)\s+(\w+)\s*\(", text, re.M)


def test_header_is_strict_c11():
    gcc = shutil.which("gcc") or pytest.skip("no gcc")
    r = subprocess.run([gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only", "-x", "c",
                        HEADER], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_prototypes_match_torch_headers(tmp_path):
    r = compile_cxx(tmp_path, HEADER)
    assert r.returncode == 0, r.stderr


def test_drifted_prototype_is_caught(tmp_path):
    """Control: the same check must fail when one prototype differs from torch's."""
    text = open(HEADER).read()
    drifted = text.replace("aoti_torch_get_dim(AtenTensorHandle tensor, int64_t* ret_dim)",
                           "aoti_torch_get_dim(AtenTensorHandle tensor, int32_t* ret_dim)")
    assert drifted != text
    bad = tmp_path / "drifted_abi.h"
    bad.write_text(drifted)
    r = compile_cxx(tmp_path, bad)
    assert r.returncode != 0
    assert "aoti_torch_get_dim" in r.stderr


def test_every_declared_function_exists_in_torch():
    """A name torch does not declare would pass the C++ check as a new declaration; catch it here."""
    ours = declared_functions(open(HEADER).read())
    assert len(ours) >= 20
    theirs = "".join(open(os.path.join(TORCH_INCLUDE, h)).read() for h in TORCH_HEADERS)
    missing = [f for f in ours if not re.search(rf"\b{f}\s*\(", theirs)]
    assert not missing, f"not declared by torch: {missing}"
