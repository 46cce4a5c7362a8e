"""c_api/blocked.c's schedules on the host (tests/blocked_schedule_host.c, the CUDA entry points replaced by checks of
their pointer arguments): for every blocked configuration, forced ones included, over shapes, batches, layouts and
two SM counts, each kernel's V, T, scratch, flags and scales inside the workspace the schedule sized, outputs inside H
and tau, side streams joined. No GPU needed."""
import os
import shutil
import subprocess

import pytest

import qr2_op
from conftest import ROOT

# configurations only forcing reaches (c_api/configs.c, `unmeasured`)
FORCED_ONLY = ["blocked_nb32_lookahead", "blocked_nb64_lookahead", "blocked_cholqr_nb32_lookahead",
               "blocked_nb64_fp16", "blocked_cholqr_nb64_fp16", "blocked_cholqr_nb64_fp16_lookahead"]
BLOCKED = [name for name, family, _ in qr2_op.configs() if family == "blocked"] + FORCED_ONLY


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    gcc = shutil.which("gcc") or pytest.skip("no gcc")
    exe = str(tmp_path_factory.mktemp("schedule") / "blocked_schedule_host")
    sources = [os.path.join(ROOT, *p) for p in (("c_api", "blocked.c"), ("c_api", "configs.c"), ("c_api", "policy.c"),
                                                ("tests", "blocked_schedule_host.c"))]
    r = subprocess.run([gcc, "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{ROOT}/c_api", f"-I{ROOT}/cuda",
                        *sources, "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.parametrize("name", BLOCKED)
def test_schedule_stays_in_its_buffers(harness, name):
    r = subprocess.run([harness, name], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
    checked = int(r.stdout.split()[-5])
    assert checked > 0 and r.stdout.rstrip().endswith(", 0 violations"), r.stdout[-3000:]
