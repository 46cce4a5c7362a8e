"""c_api/blocked.c's schedules on the host (tests/blocked_schedule_host.c, the CUDA entry points replaced by checks of
their pointer arguments): for every blocked configuration, forced ones included, over shapes, batches, layouts and
two SM counts, with side streams and without: each kernel's V, T, scratch, flags and scales inside the workspace the
schedule sized, outputs inside H and tau, side streams joined, and no two kernels the streams leave unordered touching
the same bytes where one writes (halves of a batch, lookahead). No GPU needed."""
import os
import re
import shutil
import subprocess

import pytest

import qr2_op
from conftest import ROOT

# configurations only forcing reaches (c_api/configs.c, `unmeasured`)
FORCED_ONLY = ["blocked_nb32_lookahead", "blocked_nb64_lookahead"]
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


def run_harness(harness, *args):
    r = subprocess.run([harness, *args], capture_output=True, text=True, timeout=300)
    tail = r.stdout[-3000:] + r.stderr[-1000:]
    last = r.stdout.rstrip().splitlines()[-1] if r.stdout.strip() else ""
    m = re.fullmatch(r"(\d+) schedules checked, (\d+) with side streams, (\d+) races, (\d+) violations", last)
    assert m, tail
    return r.returncode, tuple(int(g) for g in m.groups()), tail


@pytest.mark.parametrize("name", BLOCKED)
def test_schedule_stays_in_its_buffers_and_orders_its_streams(harness, name):
    rc, (checked, with_sides, races, violations), tail = run_harness(harness, name)
    assert rc == 0 and checked > 0 and races == 0 and violations == 0, tail
    # the race check saw schedules with a side stream: halves of a large batch, or lookahead
    assert with_sides > 0, tail


@pytest.mark.parametrize("name", ["blocked_nb32", "blocked_cholqr_nb32_lookahead", "blocked_nb64_lookahead"])
def test_race_check_finds_a_missing_join(harness, name):
    """Joins that order nothing leave the side stream's kernels racing the caller's stream: the check must say so."""
    rc, (checked, with_sides, races, violations), tail = run_harness(harness, "--drop-joins", name)
    assert rc != 0 and with_sides > 0 and races > 0 and violations >= races, tail


def test_overlap_against_a_byte_count(harness):
    """The race check's overlap of two batched strided accesses, against marking their bytes one by one."""
    r = subprocess.run([harness, "--check-overlap"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "0 wrong", r.stdout[-2000:] + r.stderr[-1000:]
