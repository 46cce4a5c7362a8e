"""Builds qr2_op/libqr2.so: the C11 dispatch layer (c_api/) and the CUDA kernels (cuda/) in one
shared library. It is not a Python extension (no Python.h), so one build serves any Python.

Toggles (environment):
  CUDA_HOME         the CUDA toolkit (default: the one that holds `nvcc` on PATH, else /usr/local/cuda)
  QR2_CUDA_ARCHS    semicolon-separated SM targets, default "90a;100a" (e.g. "90a" for a fast local build)
  QR2_NVCC_THREADS  nvcc --threads per compile (default 0: one per target)
"""

import concurrent.futures
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
C_SOURCES = sorted(glob.glob(os.path.join("c_api", "*.c")))
CU_SOURCES = sorted(glob.glob(os.path.join("cuda", "*.cu")))
HEADERS = sorted(glob.glob(os.path.join("c_api", "*.h")) + glob.glob(os.path.join("cuda", "*.h*")))


def cuda_home():
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if not home and shutil.which("nvcc"):
        home = os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("nvcc"))))
    if not home and os.path.exists("/usr/local/cuda/bin/nvcc"):
        home = "/usr/local/cuda"
    if not home or not os.path.exists(os.path.join(home, "bin", "nvcc")):
        sys.exit("qr2: no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH); qr2 needs nvcc and cuBLAS to build")
    return home


def gencode_flags():
    archs = [a.strip() for a in os.environ.get("QR2_CUDA_ARCHS", "90a;100a").split(";") if a.strip()]
    flags = []
    for arch in archs:
        flags += [f"-gencode=arch=compute_{arch},code=sm_{arch}"]
    base = archs[0].rstrip("a")  # portable PTX of the oldest target, for GPUs built after this
    flags += [f"-gencode=arch=compute_{base},code=compute_{base}"]
    return flags


def run(cmd):
    print(" ".join(cmd), flush=True)
    subprocess.check_call(cmd, cwd=ROOT)


class BuildLibrary(build_ext):
    """Compiles c_api/*.c with the C compiler and cuda/*.cu with nvcc, links libqr2.so."""

    def get_ext_filename(self, fullname):
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        import torch

        cuda = cuda_home()
        nvcc = os.path.join(cuda, "bin", "nvcc")
        torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
        if not os.path.exists(os.path.join(torch_lib, "libtorch_cuda.so")):
            sys.exit("qr2: this torch has no CUDA (libtorch_cuda.so missing); install a CUDA build of torch 2.11")
        out = os.path.abspath(self.get_ext_fullpath(ext.name))
        tmp = os.path.abspath(os.path.join(self.build_temp, "qr2"))
        os.makedirs(tmp, exist_ok=True)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cc = os.environ.get("CC", "gcc")
        includes = ["-Ic_api", "-Icuda"]

        jobs = []
        for src in C_SOURCES:
            obj = os.path.join(tmp, os.path.basename(src) + ".o")
            jobs.append(([cc, "-std=c11", "-O2", "-fPIC", "-fexceptions", "-fvisibility=hidden", "-Wall", "-Wextra",
                          *includes, "-c", src, "-o", obj], obj))
        for src in CU_SOURCES:
            obj = os.path.join(tmp, os.path.basename(src) + ".o")
            jobs.append(([nvcc, "-std=c++17", "-O3", "-lineinfo", "-Xcompiler", "-fPIC,-fvisibility=hidden",
                          "--threads", os.environ.get("QR2_NVCC_THREADS", "0"), *gencode_flags(), *includes,
                          "-c", src, "-o", obj], obj))
        workers = max(1, min(len(jobs), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda job: run(job[0]), jobs))

        rpaths = ["$ORIGIN/../torch/lib", torch_lib, os.path.join(cuda, "lib64")]
        run([nvcc, "-shared", "-cudart", "shared", "-o", out, *[obj for _, obj in jobs],
             f"-L{os.path.join(cuda, 'lib64')}", "-lcublas", f"-L{torch_lib}", "-ltorch_cpu", "-ltorch_cuda",
             "-Xlinker", "--no-undefined", *[f"-Xlinker=-rpath,{p}" for p in rpaths]])


setup(
    name="qr2",
    version="0.1.0",
    description="Batched FP32 QR factorisation (geqrf) for PyTorch on NVIDIA GPUs",
    packages=["qr2_op"],
    ext_modules=[Extension("qr2_op.libqr2", sources=C_SOURCES + CU_SOURCES, depends=HEADERS)],
    cmdclass={"build_ext": BuildLibrary},
    python_requires=">=3.10",
    zip_safe=False,
)
