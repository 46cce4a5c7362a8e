"""The dispatch layer is C11 only, warning-free, and the library exports only qr2's entry points."""
import glob
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

C_SOURCES = sorted(glob.glob(os.path.join(ROOT, "c_api", "*.c")))
LIBRARY = os.path.join(ROOT, "qr2_op", "libqr2.so")


@pytest.mark.parametrize("source", C_SOURCES, ids=os.path.basename)
def test_c_api_compiles_as_strict_c11_without_warnings(source):
    gcc = shutil.which("gcc") or pytest.skip("no gcc")
    r = subprocess.run([gcc, "-std=c11", "-fexceptions", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                        f"-I{ROOT}/c_api", f"-I{ROOT}/cuda", source], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_no_cplusplus_outside_cuda():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                         text=True).stdout.split()
    assert "setup.py" in out
    offenders = [f for f in out if f.endswith((".cpp", ".cc", ".cxx", ".hpp", ".hh", ".cu", ".cuh"))
                 and not f.startswith(("cuda/", "tools/bench/"))]
    assert not offenders


def test_library_exports_only_qr2_entry_points():
    nm = shutil.which("nm") or pytest.skip("no nm")
    symbols = subprocess.run([nm, "-D", "--defined-only", LIBRARY], capture_output=True, text=True).stdout
    names = [line.split()[-1] for line in symbols.splitlines() if line.strip()]
    assert "qr2_register" in names
    assert all(name.startswith("qr2_") for name in names), names


def test_library_links_torch_and_cuda_by_soname():
    readelf = shutil.which("readelf") or pytest.skip("no readelf")
    dyn = subprocess.run([readelf, "-d", LIBRARY], capture_output=True, text=True).stdout
    for soname in ("libtorch_cpu.so", "libtorch_cuda.so", "libcudart.so", "libcublas.so"):
        assert soname in dyn
    assert "libpython" not in dyn  # not a Python extension: any Python can load it
