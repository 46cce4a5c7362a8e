"""Benchmark harness for qr2, following the rules of GPU MODE's QR2 (qr_v2) evaluator.

Modes (``--mode``):

* ``test``: each of QR2's 22 test specs once: generate the input with the spec's seed, call the
  implementation on a clone, check the output.
* ``benchmark``: a warm-up run of the first case (no recheck, up to 200 repeats, 0.1 s budget),
  then each of the 12 ranked cases with every timed output rechecked (up to 200 repeats, 10 s).
* ``leaderboard`` (the scored run): a warm-up pass over every case (no recheck, up to 1000
  repeats, 0.5 s each), then every case with recheck (up to 1000 repeats, 30 s), stopping at the
  first case that fails.

One benchmark case: generate ``benchmark_count(batch, n)`` inputs with seeds seed+42, seed+84, ...;
keep clones for checking; call the implementation once on a clone of each input and check every
output (untimed); then repeat: synchronise, flush the L2 cache, time one call on each of the
original inputs with CUDA events, and (with recheck) check every output. The per-call time of an
iteration is its elapsed time divided by the number of inputs. Timing stops after at least three
iterations and 0.1 s once the relative standard error is under 0.1 %, the summed time passes the
budget, or 120 s of wall time have gone by.

``--floor`` adds a third row per case: ``qr2_op.geqrf`` with its route forced to qr2's empty kernel, timed in the
same loop (the recheck runs too, for its time, without a verdict). That is the floor of a call: the op's host path and
one launch, under QR2's protocol.

qr2's kernels need an NVIDIA GPU. Without one, ``--mode test`` runs on the CPU path (qr2_op.geqrf delegates CPU
tensors to torch.geqrf), while a timed mode (benchmark, leaderboard) stops at once with one line saying so and exit
status 2, unless ``--cpu`` asks for the long CPU run explicitly. With ``--cpu`` (GPU or not) everything runs on the
CPU with ``time.perf_counter_ns`` and no cache flush; the output then says these are CPU timings.

Examples::

    python benchmark.py --mode leaderboard --compare --torch-max-repeats 3 --json-out lb.json
    python benchmark.py --mode leaderboard --compare --floor --case 20,32,1,dense,43214
    python benchmark.py --mode test
    python benchmark.py --cpu --case 2,16,1,dense,1 --case 3,24,0,rankdef,5 --compare --max-repeats 3

Exit status: 0 when every case (or test) passed its check, 1 otherwise, 2 for bad arguments or for a timed mode
without a GPU (and without ``--cpu``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Callable

import torch

import reference
from reference import (benchmark_count, check_implementation, check_orgqr, check_ormqr, check_qr, combine_seed,
                       generate_input)

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------------------------
# Cases and mode rules
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    batch: int
    n: int
    cond: int
    seed: int
    case: str = "dense"

    @property
    def label(self) -> str:
        return f"{self.batch}x{self.n} {self.case} c{self.cond}"

    @property
    def spec(self) -> str:
        """The case in QR2's spec-line form."""
        return f"batch: {self.batch}; n: {self.n}; cond: {self.cond}; seed: {self.seed}; case: {self.case}"


def parse_case(text: str) -> Case:
    """'batch,n,cond,profile,seed' -> Case (raises ValueError on anything else)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 5:
        raise ValueError(f"--case wants batch,n,cond,profile,seed; got {text!r}")
    batch, n, cond, profile, seed = parts
    profile = profile.lower()
    if profile not in reference.CASE_NAMES:
        raise ValueError(f"unknown profile {profile!r} in --case {text!r}; known: {', '.join(reference.CASE_NAMES)}")
    case = Case(int(batch), int(n), int(cond), int(seed), profile)
    if case.batch <= 0 or case.n <= 0 or case.cond < 0:
        raise ValueError(f"--case {text!r}: need batch > 0, n > 0, cond >= 0")
    return case


@dataclasses.dataclass(frozen=True)
class ModeRules:
    """QR2's repeat counts and time budgets for one mode."""

    warmup_all_cases: bool  # False: warm up on the first case only
    warmup_repeats: int
    warmup_budget_ns: float
    repeats: int
    budget_ns: float
    stop_at_first_failure: bool


MODE_RULES = {
    "benchmark": ModeRules(False, 200, 0.1e9, 200, 10e9, False),
    "leaderboard": ModeRules(True, 1000, 0.5e9, 1000, 30e9, True),
}
MODES = ("test", "benchmark", "leaderboard")


def default_cases(mode: str) -> list[Case]:
    table = reference.TESTS if mode == "test" else reference.BENCHMARKS
    return [Case(**spec) for spec in table]


def apply_secret_seed(cases: list[Case], secret: int | None) -> list[Case]:
    if secret is None:
        return list(cases)
    return [dataclasses.replace(c, seed=combine_seed(c.seed, secret)) for c in cases]


# ---------------------------------------------------------------------------------------------
# Implementations
# ---------------------------------------------------------------------------------------------


def _qr2_geqrf() -> Callable:
    import qr2_op  # imported only when asked for, so `--impl torch` works without the library

    return qr2_op.geqrf


def _broken_geqrf(A: torch.Tensor):
    """TEST ONLY: torch.geqrf with tau zeroed (Q = I), so the factor check must fail."""
    H, tau = torch.geqrf(A)
    return H, torch.zeros_like(tau)


# name -> loader returning the callable. "broken-for-tests" is hidden from --help and exists only
# so that tests/test_benchmark.py can check that a wrong implementation fails the run.
IMPLS: dict[str, Callable[[], Callable]] = {
    "qr2": _qr2_geqrf,
    "torch": lambda: torch.geqrf,
    "broken-for-tests": lambda: _broken_geqrf,
    "floor": _qr2_geqrf,  # --floor: qr2_op.geqrf with its route forced to the empty kernel (see run_benchmark_case)
}
PUBLIC_IMPLS = ("qr2", "torch")


def _qr2_qr() -> Callable:
    import qr2_op

    return qr2_op.qr


def _reflectors(A: torch.Tensor) -> tuple:
    """orgqr's arguments for the case input A: qr2.geqrf's (H, tau), made before the timed calls."""
    import qr2_op

    H, tau = qr2_op.geqrf(A)
    return H[..., :, :tau.shape[-1]], tau


def _reflectors_and_input(A: torch.Tensor) -> tuple:
    """ormqr's arguments: qr2.geqrf's (H, tau) and A itself (Q^T A is R)."""
    return (*_reflectors(A), A)


def _with_arguments(loader: Callable, bind: Callable) -> Callable[[], Callable]:
    """A loader of the call f(args) = (args, op(*args)) (bind adds fixed arguments): the check sees what was used."""

    def load():
        op = bind(loader())
        return lambda args: (args, op(*args))

    return load


def _qr2_op(name: str) -> Callable:
    import qr2_op

    return getattr(qr2_op, name)


@dataclasses.dataclass(frozen=True)
class Op:
    """An operation benchmark.py times: its implementations (name -> loader of the callable), the check each output
    must pass, (A, output) -> (ok, message), and what is made of each case input before the timed calls (None: the
    call takes the input itself)."""

    impls: dict
    check: Callable
    prepare: Callable | None = None


def _ormqr_qt(op):
    return lambda H, tau, C: op(H, tau, C, True, True)


# --op: geqrf (QR2's problem, (H, tau)), qr (torch.linalg.qr's (Q, R), mode "reduced"), orgqr (Q from qr2.geqrf's
# reflectors) or ormqr (Q^T A from them), under the same rules
OPS = {
    "geqrf": Op(IMPLS, check_implementation),
    "qr": Op({"qr2": _qr2_qr, "torch": lambda: torch.linalg.qr}, check_qr),
    "orgqr": Op({"qr2": _with_arguments(lambda: _qr2_op("orgqr"), lambda op: op),
                 "torch": _with_arguments(lambda: torch.linalg.householder_product, lambda op: op)},
                check_orgqr, _reflectors),
    "ormqr": Op({"qr2": _with_arguments(lambda: _qr2_op("ormqr"), _ormqr_qt),
                 "torch": _with_arguments(lambda: torch.ormqr, _ormqr_qt)},
                check_ormqr, _reflectors_and_input),
}
# Implementations timed but not judged: their outputs are checked for the checker's time only (QR2's loop must run
# it between repeats), never for a verdict, and they stay out of the pass count and the speedups.
UNJUDGED_IMPLS = ("floor",)


@contextlib.contextmanager
def impl_setup(impl: str):
    """The floor: every call of qr2_op.geqrf launches qr2's empty kernel instead of a factorisation, so its time is
    the op's host path and one launch, measured exactly as the real calls are."""
    if impl != "floor":
        yield
        return
    import qr2_op

    qr2_op._force_config("empty_kernel")
    try:
        yield
    finally:
        qr2_op._force_config(None)

# ---------------------------------------------------------------------------------------------
# Statistics and the stop rule
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Stats:
    """Per-call times in nanoseconds."""

    runs: int
    mean: float
    std: float
    err: float
    best: float
    worst: float


def calculate_stats(durations: list[float]) -> Stats:
    """Mean, sample standard deviation, standard error of the mean, best and worst."""
    runs = len(durations)
    mean = sum(durations) / runs
    std = math.sqrt(sum((d - mean) ** 2 for d in durations) / (runs - 1)) if runs > 1 else 0.0
    err = std / math.sqrt(runs)
    return Stats(runs, mean, std, err, float(min(durations)), float(max(durations)))


MIN_WALL_NS = 0.1e9  # no stopping before 0.1 s of wall time ...
MIN_ITERATION = 2  # ... nor before the third iteration (index 2)
TARGET_RELATIVE_ERROR = 0.001
MAX_WALL_NS = 120e9


def should_stop(iteration: int, wall_ns: float, durations: list[float], budget_ns: float) -> bool:
    """QR2's stop rule, asked after iteration `iteration` (0-based) with `wall_ns` elapsed."""
    if iteration < MIN_ITERATION or wall_ns <= MIN_WALL_NS:
        return False
    stats = calculate_stats(durations)
    precise = stats.mean <= 0 or stats.err / stats.mean < TARGET_RELATIVE_ERROR
    return precise or stats.mean * stats.runs > budget_ns or wall_ns > MAX_WALL_NS


# ---------------------------------------------------------------------------------------------
# Timing one iteration
# ---------------------------------------------------------------------------------------------


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def clear_l2_cache() -> None:
    """Write 256 MiB (more than any L2) so that no input or output stays cached between iterations."""
    flush = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
    flush.fill_(42)
    del flush


def time_iteration(fn: Callable, inputs: list[torch.Tensor], device: str) -> tuple[float, list]:
    """Call fn on every input once; returns (nanoseconds per call, outputs)."""
    synchronize(device)
    if device == "cuda":
        clear_l2_cache()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        outputs = [fn(A) for A in inputs]
        end.record()
        torch.cuda.synchronize()
        elapsed_ns = start.elapsed_time(end) * 1e6
    else:
        t0 = time.perf_counter_ns()
        outputs = [fn(A) for A in inputs]
        elapsed_ns = time.perf_counter_ns() - t0
    return elapsed_ns / len(inputs), outputs


# ---------------------------------------------------------------------------------------------
# Running one case
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class CaseResult:
    impl: str
    status: str  # "pass", "fail", "skipped", or "unjudged" (timed, outputs not judged: UNJUDGED_IMPLS)
    stats: Stats | None = None
    message: str = ""  # the failure, or the last passing check's message
    residuals: dict = dataclasses.field(default_factory=dict)  # worst scaled residuals seen
    checks: int = 0  # outputs checked

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def timed(self) -> bool:
        """Has times to report: passed, or ran unjudged."""
        return self.stats is not None and self.status in ("pass", "unjudged")


class Checker:
    """Checks outputs, remembers the first failure and the worst of each scaled residual. An unjudged checker runs
    the same check for its time only and answers True."""

    def __init__(self, result: CaseResult, judged: bool = True, check: Callable = check_implementation):
        self.result = result
        self.judged = judged
        self.run_check = check

    def check(self, A: torch.Tensor, output) -> bool:
        if not self.judged:  # only the check's time counts (it is handed a real factorisation, see run_benchmark_case)
            self.run_check(A, output)
            self.result.checks += 1
            self.result.message = "not judged: the empty kernel's outputs are not a factorisation"
            return True
        ok, message = self.run_check(A, output)
        self.result.checks += 1
        self.result.message = message
        if not ok:
            self.result.status = "fail"
            return False
        for key, value in reference.parse_check_message(message).items():
            if key.startswith("scaled_"):
                self.result.residuals[key] = max(value, self.result.residuals.get(key, value))
        return True


def make_inputs(case: Case, device: str) -> list[torch.Tensor]:
    """benchmark_count inputs with seeds seed+42, seed+84, ... (QR2 never times the spec seed)."""
    inputs, seed = [], case.seed
    for _ in range(benchmark_count(case.batch, case.n)):
        seed += 42
        inputs.append(generate_input(case.batch, case.n, case.cond, seed, case.case, device))
    return inputs


def run_test_case(impl: str, fn: Callable, case: Case, device: str, check: Callable = check_implementation,
                  prepare: Callable | None = None) -> CaseResult:
    """Test mode: one input with the spec seed, one call on a clone (or on what `prepare` makes of it), one check."""
    result = CaseResult(impl, "pass")
    try:
        A = generate_input(case.batch, case.n, case.cond, case.seed, case.case, device)
        synchronize(device)
        output = fn(A.clone() if prepare is None else prepare(A))
        synchronize(device)
        Checker(result, check=check).check(A, output)
    except Exception as exc:  # a crash is a failed test, not a crashed harness
        result.status, result.message = "fail", f"raised {type(exc).__name__}: {exc}"
    return result


def run_benchmark_case(
    impl: str, fn: Callable, case: Case, device: str, *, recheck: bool, max_repeats: int, budget_ns: float,
    check: Callable = check_implementation, prepare: Callable | None = None,
) -> CaseResult:
    """Benchmark and leaderboard modes: QR2's timed loop for one case (see the module docstring); `prepare` makes each
    input into the call's arguments before any call is timed."""
    judged = impl not in UNJUDGED_IMPLS
    result = CaseResult(impl, "pass" if judged else "unjudged")
    checker = Checker(result, judged, check)
    try:
        inputs = make_inputs(case, device)
        # the floor's outputs are uninitialised: it checks real factorisations instead, so that its recheck (and the
        # idle time it leaves before the next repeat) is the judged implementation's
        valid = None if judged else [fn(A) for A in inputs]
        with impl_setup(impl):
            return _timed_loop(fn, inputs, device, result, checker, valid, recheck, max_repeats, budget_ns, prepare)
    except Exception as exc:
        result.status, result.stats, result.message = "fail", None, f"raised {type(exc).__name__}: {exc}"
    return result


def _timed_loop(fn, inputs, device, result, checker, valid, recheck, max_repeats, budget_ns, prepare) -> CaseResult:
    originals = [A.clone() for A in inputs]
    if prepare is None:
        outputs = [fn(A.clone()) for A in inputs]
    else:
        inputs = [prepare(A) for A in inputs]
        outputs = [fn(x) for x in inputs]
    if not all(checker.check(A, out) for A, out in zip(originals, valid or outputs)):
        return result

    durations: list[float] = []
    started = time.perf_counter_ns()
    for iteration in range(max_repeats):
        per_call_ns, outputs = time_iteration(fn, inputs, device)
        durations.append(per_call_ns)
        # As in QR2, the previous outputs stay alive until the next iteration's calls return.
        if recheck and not all(checker.check(A, out) for A, out in zip(originals, valid or outputs)):
            return result
        if should_stop(iteration, time.perf_counter_ns() - started, durations, budget_ns):
            break
    result.stats = calculate_stats(durations)
    return result


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def format_time(ns: float | None) -> str:
    if ns is None:
        return "-"
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def format_residual(result: CaseResult, key: str) -> str:
    """The worst scaled residual of a passing case; failures are explained under the table instead."""
    value = result.residuals.get(f"scaled_{key}_residual") if result.passed else None
    return "-" if value is None else f"{value:.3g}"


def geometric_mean(values: list[float]) -> float | None:
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def progress_line(index: int, total: int, case: Case, result: CaseResult) -> str:
    head = f"[{index + 1:>2}/{total}] {result.impl:<7} {case.label:<24}"
    if result.status == "fail":
        return f"{head} FAIL: {result.message}"
    if result.status == "skipped":
        return f"{head} skipped: {result.message}"
    residuals = f"factor={format_residual(result, 'factor')} orth={format_residual(result, 'orthogonality')}"
    if result.status == "unjudged":
        residuals = "(outputs not judged)"
    s = result.stats
    if s is None:  # test mode
        return f"{head} pass  {residuals}"
    return (
        f"{head} mean {format_time(s.mean)}  std {format_time(s.std)}  best {format_time(s.best)}  "
        f"worst {format_time(s.worst)}  runs {s.runs}  {result.status}  {residuals}"
    )


def speedup(results: dict[str, CaseResult], first: str) -> float | None:
    """torch mean / first impl's mean for one case, when both were measured."""
    mine, theirs = results.get(first), results.get("torch")
    if first == "torch" or not mine or not theirs or not mine.stats or not theirs.stats:
        return None
    if not (mine.passed and theirs.passed):
        return None
    return theirs.stats.mean / mine.stats.mean


def results_table(cases: list[Case], table: list[dict[str, CaseResult]], impls: list[str], timed: bool) -> str:
    comparing = "torch" in impls and any(i != "torch" and i not in UNJUDGED_IMPLS for i in impls)
    columns = [("#", 3, ">"), ("case", 24, "<"), ("impl", 7, "<")]
    if timed:
        columns += [("mean", 11, ">"), ("std", 11, ">"), ("best", 11, ">"), ("worst", 11, ">"), ("runs", 5, ">")]
    columns += [("verdict", 7, "<"), ("factor", 8, ">"), ("orth", 8, ">"), ("recon", 8, ">")]
    if timed and comparing:
        columns += [("speedup", 8, ">")]

    def row(values):
        return "  ".join(f"{v:{align}{width}}" for v, (_, width, align) in zip(values, columns)).rstrip()

    header = row([name for name, _, _ in columns])
    lines = [header, "-" * len(header)]
    for index, (case, results) in enumerate(zip(cases, table)):
        for position, impl in enumerate(impls):
            result = results.get(impl)
            if result is None:
                continue
            values = [str(index) if position == 0 else "", case.label if position == 0 else "", impl]
            if timed:
                s = result.stats if result.timed else None
                values += [format_time(s.mean) if s else "-", format_time(s.std) if s else "-",
                           format_time(s.best) if s else "-", format_time(s.worst) if s else "-",
                           str(s.runs) if s else "-"]
            verdict = {"pass": "pass", "fail": "FAIL", "unjudged": "-"}.get(result.status, result.status)
            values += [verdict, format_residual(result, "factor"), format_residual(result, "orthogonality"),
                       format_residual(result, "reconstruction")]
            if timed and comparing:
                ratio = speedup(results, impl) if impl != "torch" else None
                values.append(f"{ratio:.2f}x" if ratio is not None else "")
            lines.append(row(values))
    return "\n".join(lines)


def summary(cases: list[Case], table: list[dict[str, CaseResult]], impls: list[str], timed: bool) -> dict:
    """Geometric means (timed modes) or pass counts, per implementation."""
    out: dict = {"passed": True, "impls": {}}
    for impl in impls:
        ran = [results[impl] for results in table if impl in results]
        failed = sum(r.status == "fail" for r in ran)
        passed = sum(r.passed for r in ran)
        entry = {"cases": len(cases), "passed": passed, "failed": failed}
        if timed:
            means = [r.stats.mean for r in ran if r.timed]
            entry["geomean_ns"] = geometric_mean(means)
            entry["geomean_cases"] = len(means)
        out["impls"][impl] = entry
        if impl not in UNJUDGED_IMPLS:  # the floor is a measurement: its failures are reported, not a verdict
            out["passed"] = out["passed"] and failed == 0 and passed == len(cases)
    if timed and "torch" in impls and any(i != "torch" and i not in UNJUDGED_IMPLS for i in impls):
        ratios = [r for r in (speedup(results, impls[0]) for results in table) if r is not None]
        out["geomean_speedup"] = geometric_mean(ratios)
        out["speedup_cases"] = len(ratios)
    return out


def footer_lines(totals: dict, impls: list[str], n_cases: int, timed: bool) -> list[str]:
    lines = []
    for impl in impls:
        entry = totals["impls"][impl]
        if not timed:
            lines.append(f"{impl}: {entry['passed']}/{n_cases} passed")
            continue
        measured = entry["geomean_cases"]
        if entry["geomean_ns"] is None:
            lines.append(f"geomean {impl}: none measured")
            continue
        note = "" if measured == n_cases else f" (incomplete: {n_cases - measured} case(s) not measured)"
        lines.append(f"geomean {impl}: {format_time(entry['geomean_ns'])} over {measured} of {n_cases} cases{note}")
    if totals.get("geomean_speedup") is not None:
        lines.append(
            f"geomean speedup (torch / {impls[0]}): {totals['geomean_speedup']:.2f}x over {totals['speedup_cases']} cases"
        )
    return lines


# ---------------------------------------------------------------------------------------------
# Environment, JSON and plot
# ---------------------------------------------------------------------------------------------


def git_commit() -> str | None:
    """HEAD, with "-dirty" when the tree differs from it (a copied working tree need not be at its HEAD)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, timeout=10)
        # untracked files count too (a copied tree carries them); --no-optional-locks: never touch the index
        changed = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain"], cwd=HERE,
                                 capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("-dirty" if changed.returncode == 0 and changed.stdout.strip() else "")


def environment(device: str, mode: str, argv: list[str]) -> dict:
    return {
        "hostname": socket.gethostname(),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "device": device,
        "timer": "cuda events" if device == "cuda" else "time.perf_counter_ns (CPU timings)",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": mode,
        "argv": list(argv),
    }


def environment_line(env: dict) -> str:
    commit = env["commit"] or "unknown"
    commit = commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
    gpu = env["gpu"] if env["device"] == "cuda" else "none (CPU run)"
    return f"environment: GPU {gpu} | torch {env['torch']} | CUDA {env['cuda']} | commit {commit} | host {env['hostname']} | {env['date']}"


def result_json(result: CaseResult) -> dict:
    entry = {"status": result.status, "message": result.message, "checks": result.checks, "residuals": result.residuals}
    if result.timed:
        entry.update({f"{k}_ns" if k != "runs" else k: v for k, v in dataclasses.asdict(result.stats).items()})
    return entry


def write_json(path: str, env: dict, cases: list[Case], table, impls: list[str], totals: dict, args) -> None:
    rules = MODE_RULES.get(env["mode"])
    report = {
        "environment": env,
        "impls": impls,
        "settings": {
            "op": args.op,
            "mode_rules": dataclasses.asdict(rules) if rules else None,
            "max_repeats": {impl: repeats_for(impl, rules.repeats, args) for impl in impls} if rules else None,
            "secret_seed": args.secret_seed,
            "time_unit": "ns",
        },
        "cases": [
            {
                "index": i,
                **dataclasses.asdict(case),
                "label": case.label,
                "spec": case.spec,
                "inputs": benchmark_count(case.batch, case.n) if env["mode"] != "test" else 1,
                "results": {impl: result_json(r) for impl, r in results.items()},
                "speedup": speedup(results, impls[0]),
            }
            for i, (case, results) in enumerate(zip(cases, table))
        ],
        "summary": totals,
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=2)


def write_plot(path: str, cases: list[Case], table, impls: list[str], env: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    width = 0.8 / len(impls)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(cases) + 2), 4.5))
    for k, impl in enumerate(impls):
        xs, ys = [], []
        for i, results in enumerate(table):
            r = results.get(impl)
            if r is not None and r.timed:
                xs.append(i + (k - (len(impls) - 1) / 2) * width)
                ys.append(r.stats.mean / 1e3)
        ax.bar(xs, ys, width=width, label=impl)
    ax.set_yscale("log")
    ax.set_ylabel("mean time per call (µs, log scale)")
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c.label for c in cases], rotation=45, ha="right", fontsize=8)
    where = env["gpu"] if env["device"] == "cuda" else "CPU timings"
    ax.set_title(f"qr2 {env['mode']}: {where}, torch {env['torch']}")
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Time and check a geqrf (or qr) implementation under GPU MODE QR2's rules.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Custom cases: --case batch,n,cond,profile,seed (profiles: " + ", ".join(reference.CASE_NAMES) + ").",
    )
    p.add_argument("--mode", choices=MODES, default="benchmark", help="test: the 22 QR2 tests, checked once; benchmark: the 12 ranked cases, "
                   "up to 200 repeats / 10 s each; leaderboard: the scored run, up to 1000 repeats / 30 s each, "
                   "stops at the first failure (default: benchmark)")
    p.add_argument("--op", choices=tuple(OPS), default="geqrf",
                   help="geqrf: (H, tau), QR2's problem (default); qr: (Q, R) as torch.linalg.qr returns them (mode "
                        "\"reduced\"), checked by the same gates on that Q and R; orgqr: Q from qr2.geqrf's reflectors "
                        "(made before the timed calls), the same gates on Q and triu(H); ormqr: Q^T A from them, "
                        "the factor gate on it")
    p.add_argument("--impl", default="qr2", help="implementation: qr2 (qr2_op's operator of --op; default) or torch "
                   "(torch.geqrf, torch.linalg.qr, torch.linalg.householder_product or torch.ormqr)")
    p.add_argument("--compare", action="store_true",
                   help="time torch's op too (torch.geqrf, or torch.linalg.qr with --op qr), case by case, and report "
                        "speedups")
    p.add_argument("--case", action="append", default=[], metavar="B,N,COND,PROFILE,SEED",
                   help="run this case instead of the mode's list (repeatable)")
    p.add_argument("--max-repeats", type=int, metavar="N", help="cap the timed repeats of every run")
    p.add_argument("--torch-max-repeats", type=int, metavar="N",
                   help="cap the repeats of torch.geqrf runs (default: as --max-repeats / the mode's)")
    p.add_argument("--floor", action="store_true",
                   help="time the floor too: qr2_op.geqrf launching an empty kernel instead of a factorisation, in the "
                        "same loop (its outputs checked for the checker's time only; GPU, benchmark and leaderboard)")
    p.add_argument("--secret-seed", type=int, metavar="S", help="remap every case seed as QR2's POPCORN_SEED does")
    p.add_argument("--cpu", action="store_true",
                   help="run on the CPU even if a GPU is present; without a GPU, the timed modes (benchmark, "
                        "leaderboard) need it: they time the CPU delegation to torch.geqrf, which takes long")
    p.add_argument("--json-out", metavar="PATH", help="write every statistic and the environment as JSON")
    p.add_argument("--plot", metavar="PATH.png", help="bar chart of per-case time per implementation (needs matplotlib)")
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.impl not in OPS[args.op].impls or args.impl in UNJUDGED_IMPLS:
        parser.error(f"--impl must be one of {', '.join(PUBLIC_IMPLS)}")
    if args.floor and args.op != "geqrf":
        parser.error("--floor times qr2.geqrf's empty kernel: it goes with --op geqrf")
    if args.compare and args.impl == "torch":
        parser.error("--compare times --impl against torch; leave --impl at qr2")
    if args.floor and (args.mode == "test" or args.cpu or not torch.cuda.is_available()):
        parser.error("--floor times qr2's empty kernel: it needs a CUDA device and a timed mode "
                     "(benchmark, leaderboard)")
    for flag in ("max_repeats", "torch_max_repeats"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    try:
        args.cases = [parse_case(text) for text in args.case]
    except ValueError as exc:
        parser.error(str(exc))
    if args.plot:
        try:
            import matplotlib  # noqa: F401  (checked now, not after a long run)
        except ImportError:
            parser.error("--plot needs matplotlib, which is not installed")
    return args


def repeats_for(impl: str, mode_repeats: int, args: argparse.Namespace) -> int:
    cap = args.max_repeats
    if impl == "torch" and args.torch_max_repeats is not None:
        cap = args.torch_max_repeats
    return mode_repeats if cap is None else min(mode_repeats, cap)


def run_warmups(fns: dict, cases: list[Case], device: str, rules: ModeRules, args) -> None:
    warm_cases = cases if rules.warmup_all_cases else cases[:1]
    for impl, fn in fns.items():
        for case in warm_cases:
            result = run_benchmark_case(
                impl, fn, case, device, recheck=False,
                max_repeats=repeats_for(impl, rules.warmup_repeats, args), budget_ns=rules.warmup_budget_ns,
                check=OPS[args.op].check, prepare=OPS[args.op].prepare,
            )
            runs = result.stats.runs if result.stats else 0
            print(f"warm-up {impl:<7} {case.label:<24} {runs} run(s) {result.status}", flush=True)


def run_cases(fns: dict, cases: list[Case], device: str, mode: str, args) -> list[dict[str, CaseResult]]:
    rules = MODE_RULES.get(mode)
    if rules is not None:
        run_warmups(fns, cases, device, rules, args)
    stopped: set[str] = set()  # leaderboard: implementations that already failed a case
    judged = {impl for impl in fns if impl not in UNJUDGED_IMPLS}
    table = []
    for index, case in enumerate(cases):
        results = {}
        for impl, fn in fns.items():
            if impl in stopped or (impl not in judged and judged <= stopped):
                results[impl] = CaseResult(impl, "skipped", message="an earlier case failed")
                continue
            if rules is None:
                result = run_test_case(impl, fn, case, device, OPS[args.op].check, OPS[args.op].prepare)
            else:
                result = run_benchmark_case(
                    impl, fn, case, device, recheck=True,
                    max_repeats=repeats_for(impl, rules.repeats, args), budget_ns=rules.budget_ns,
                    check=OPS[args.op].check, prepare=OPS[args.op].prepare,
                )
                if result.status == "fail" and rules.stop_at_first_failure:
                    stopped.add(impl)
            results[impl] = result
            print(progress_line(index, len(cases), case, result), flush=True)
        table.append(results)
        if stopped and judged <= stopped:
            # every implementation has stopped: record the remaining cases as skipped
            for _ in cases[index + 1:]:
                table.append({impl: CaseResult(impl, "skipped", message="an earlier case failed") for impl in fns})
            break
    return table


NO_GPU_LINE = ("qr2: no NVIDIA GPU here, and qr2's kernels need one: `python3 benchmark.py --mode test` runs the 22 "
               "QR2 test cases on the CPU path in a minute or two, or add --cpu to time the CPU delegation anyway "
               "(slow; CPU timings, not GPU results)")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if args.mode in MODE_RULES and not args.cpu and not torch.cuda.is_available():
        print(NO_GPU_LINE, file=sys.stderr, flush=True)  # a timed mode on the CPU is a long run: only when asked
        return 2
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    impls = ([args.impl, "torch"] if args.compare else [args.impl]) + (["floor"] if args.floor else [])
    fns = {impl: OPS[args.op].impls[impl]() for impl in impls}
    cases = apply_secret_seed(args.cases or default_cases(args.mode), args.secret_seed)
    timed = args.mode != "test"
    env = environment(device, args.mode, argv)

    print(f"qr2 benchmark: op={args.op} mode={args.mode} impls={','.join(impls)} cases={len(cases)} device={env['gpu']}"
          + (f" secret-seed={args.secret_seed}" if args.secret_seed is not None else ""), flush=True)
    if device == "cpu":
        print("NOTE: CPU run: times come from time.perf_counter on the CPU (no CUDA events, no L2 flush); "
              "they are CPU timings, not GPU results.", flush=True)

    table = run_cases(fns, cases, device, args.mode, args)
    totals = summary(cases, table, impls, timed)

    print()
    print(results_table(cases, table, impls, timed))
    for case, results in zip(cases, table):
        for impl, result in results.items():
            if result.status == "fail":
                print(f"FAIL {case.label} [{impl}]: {result.message}")
    for line in footer_lines(totals, impls, len(cases), timed):
        print(line)
    if device == "cpu" and timed:
        print("(CPU timings)")
    print(environment_line(env))
    print("result: " + ("pass" if totals["passed"] else "FAIL"), flush=True)

    if args.json_out:
        write_json(args.json_out, env, cases, table, impls, totals, args)
    if args.plot and timed:
        write_plot(args.plot, cases, table, impls, env)
    return 0 if totals["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
