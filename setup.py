"""Builds qr2_op/libqr2.so: the C11 dispatch layer (c_api/) and the CUDA kernels (cuda/, every .cu under it, in any
subfolder) in one shared library. It is not a Python extension (no Python.h), so one build serves any Python.
Development aids (tools/, and any tools/ or bench/ folder under cuda/) are never compiled here.

Toggles (environment):
  CUDA_HOME         the CUDA toolkit (default: the one that holds `nvcc` on PATH, else /usr/local/cuda)
  QR2_CUDA_ARCHS    semicolon-separated SM targets, default "90a;100a" (e.g. "90a" for a fast local build)
  QR2_NVCC_THREADS  nvcc --threads per compile (default 0: one per target)

Builds are incremental: objects and the linked library are kept in build/qr2/ (pip's editable builds use a fresh
temporary folder each time, so they are kept outside it). An object is recompiled only when its source or any
header (c_api/*.h, cuda/**/*.h, cuda/**/*.cuh) is newer than it, or its compile command changed (another
QR2_CUDA_ARCHS, say); the library is relinked only when an object or the link command changed. A second
`pip install -e . --no-build-isolation` with nothing changed compiles and links nothing. One progress line per
compiled file goes to stderr (`pip install -v` shows it).
"""

import concurrent.futures
import filecmp
import glob
import os
import shutil
import subprocess
import sys
import threading
import time

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
EXCLUDED_DIRS = ("tools", "bench")  # development aids under cuda/, if any: built by their own scripts


def _sources(pattern):
    """Repository-relative paths matching `pattern` (recursive), outside EXCLUDED_DIRS, sorted."""
    found = glob.glob(pattern, root_dir=ROOT, recursive=True)
    return sorted(p for p in found if not set(os.path.normpath(p).split(os.sep)[:-1]) & set(EXCLUDED_DIRS))


C_SOURCES = _sources(os.path.join("c_api", "*.c"))
CU_SOURCES = _sources(os.path.join("cuda", "**", "*.cu"))
CUDA_HEADERS = _sources(os.path.join("cuda", "**", "*.h")) + _sources(os.path.join("cuda", "**", "*.cuh"))
HEADERS = sorted(_sources(os.path.join("c_api", "*.h")) + CUDA_HEADERS)
# -Icuda first (includes are written relative to cuda/, e.g. "launch.cuh"), then every subfolder holding headers
INCLUDES = ["-Ic_api", "-Icuda"] + [f"-I{d}" for d in sorted({os.path.dirname(h) for h in CUDA_HEADERS} - {"cuda"})]
CACHE = os.path.join("build", "qr2")  # objects, the linked library and their command stamps, kept between builds


def log(message):
    print(f"qr2: {message}", file=sys.stderr, flush=True)


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


def up_to_date(target, inputs, command):
    """Whether `target` exists, was made by `command` (its stamp), and is newer than every one of `inputs`."""
    try:
        made = os.path.getmtime(os.path.join(ROOT, target))
        with open(os.path.join(ROOT, target + ".cmd")) as f:
            stamp = f.read()
        return stamp == "\n".join(command) and all(os.path.getmtime(os.path.join(ROOT, p)) < made for p in inputs)
    except OSError:
        return False


def make(target, command_for, started_message=None):
    """Runs command_for(path) writing a temporary file, then moves it to `target` (never a half-written target), dates
    it to when the command started (a source edited meanwhile is newer) and writes its command stamp."""
    path = os.path.join(ROOT, target)
    stem, ext = os.path.splitext(path)
    tmp = f"{stem}.tmp{os.getpid()}-{threading.get_ident()}{ext}"
    command, run_command = command_for(target), command_for(os.path.relpath(tmp, ROOT))
    if started_message:
        log(started_message)
    started = time.time()
    try:
        subprocess.check_call(run_command, cwd=ROOT)
    except (OSError, subprocess.CalledProcessError):
        log("failed: " + " ".join(run_command))
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    os.utime(tmp, (started, started))
    os.replace(tmp, path)
    with open(path + ".cmd", "w") as f:
        f.write("\n".join(command))


class BuildLibrary(build_ext):
    """Compiles c_api/*.c with the C compiler and cuda/**/*.cu with nvcc, links libqr2.so (incrementally)."""

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
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cc = os.environ.get("CC", "gcc")
        c_flags = [cc, "-std=c11", "-O2", "-fPIC", "-fexceptions", "-fvisibility=hidden", "-Wall", "-Wextra", *INCLUDES]
        cu_flags = [nvcc, "-std=c++17", "-O3", "-lineinfo", "-Xcompiler", "-fPIC,-fvisibility=hidden",
                    "--threads", os.environ.get("QR2_NVCC_THREADS", "0"), *gencode_flags(), *INCLUDES]

        jobs = []  # (source, object, command for an output path)
        for src in C_SOURCES + CU_SOURCES:
            obj = os.path.join(CACHE, src + ".o")  # the source's path under build/qr2/: no two objects collide
            flags = c_flags if src.endswith(".c") else cu_flags
            jobs.append((src, obj, lambda o, flags=flags, src=src: [*flags, "-c", src, "-o", o]))
        stale = [job for job in jobs if not up_to_date(job[1], [job[0], *HEADERS], job[2](job[1]))]
        if len(stale) < len(jobs):
            log(f"{len(jobs) - len(stale)} of {len(jobs)} objects up to date")
        for _, obj, _ in stale:
            os.makedirs(os.path.dirname(os.path.join(ROOT, obj)), exist_ok=True)
        if stale:
            workers = max(1, min(len(stale), os.cpu_count() or 1))
            with concurrent.futures.ThreadPoolExecutor(workers) as pool:
                futures = [pool.submit(make, obj, command, f"compiling {src} ({i}/{len(stale)})")
                           for i, (src, obj, command) in enumerate(stale, 1)]
            failed = [src for (src, _, _), future in zip(stale, futures) if future.exception() is not None]
            if failed:
                sys.exit(f"qr2: {len(failed)} file(s) failed to compile: {', '.join(failed)}")

        objects = [obj for _, obj, _ in jobs]
        library = os.path.join(CACHE, "libqr2.so")
        rpaths = ["$ORIGIN/../torch/lib", torch_lib, os.path.join(cuda, "lib64")]

        def link(o):
            return [nvcc, "-shared", "-cudart", "shared", "-o", o, *objects, f"-L{os.path.join(cuda, 'lib64')}",
                    "-lcublas", f"-L{torch_lib}", "-ltorch_cpu", "-ltorch_cuda", "-Xlinker", "--no-undefined",
                    *[f"-Xlinker=-rpath,{p}" for p in rpaths]]

        if stale or not up_to_date(library, objects, link(library)):
            try:
                make(library, link, f"linking {len(objects)} objects into libqr2.so")
            except subprocess.CalledProcessError:
                sys.exit("qr2: linking libqr2.so failed")
        else:
            log("nothing changed: libqr2.so not relinked")
        library = os.path.join(ROOT, library)
        shutil.copy2(library, out)
        # setuptools copies `out` on into qr2_op/ (pip -e, --inplace) only when it is newer than the file there: date
        # it so that an identical library is not rewritten (under a process that has it loaded) and a different one is
        installed = os.path.join(ROOT, "qr2_op", os.path.basename(out))
        if os.path.exists(installed):
            if filecmp.cmp(installed, library, shallow=False):
                mtime = min(os.stat(installed).st_mtime_ns, os.stat(library).st_mtime_ns)
                os.utime(out, ns=(mtime, mtime))
            else:
                os.utime(out)


setup(
    name="qr2",
    version="0.1.0",
    description="Batched FP32 QR factorisation (geqrf) for PyTorch on NVIDIA GPUs",
    license="BSD-3-Clause",
    packages=["qr2_op"],
    ext_modules=[Extension("qr2_op.libqr2", sources=C_SOURCES + CU_SOURCES, depends=HEADERS)],
    cmdclass={"build_ext": BuildLibrary},
    python_requires=">=3.10",
    zip_safe=False,
)
