"""Tests of benchmark.py: the harness end to end on the CPU with tiny cases, and its helpers."""

import json
import math
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import benchmark  # noqa: E402
import reference  # noqa: E402
from conftest import requires_cuda  # noqa: E402

TINY = ["--cpu", "--max-repeats", "3", "--case", "2,16,1,dense,1", "--case", "3,12,0,rankdef,5"]


def run_main(capsys, *args):
    code = benchmark.main(list(args))
    return code, capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# End to end, in process
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["qr2", "torch"])
def test_benchmark_mode_single_impl(capsys, impl):
    code, out = run_main(capsys, *TINY, "--impl", impl)
    assert code == 0, out
    assert "CPU timings" in out
    assert f"geomean {impl}:" in out
    assert "2x16 dense c1" in out and "3x12 rankdef c0" in out
    assert "FAIL" not in out and "result: pass" in out


def test_compare_writes_json(capsys, tmp_path):
    path = tmp_path / "out.json"
    code, out = run_main(capsys, *TINY, "--compare", "--json-out", str(path))
    assert code == 0, out
    assert "geomean qr2:" in out and "geomean torch:" in out and "geomean speedup (torch / qr2):" in out
    header = next(line for line in out.splitlines() if "verdict" in line)
    assert header.split()[:3] == ["#", "case", "impl"] and header.split()[-1] == "speedup"

    report = json.loads(path.read_text())
    env = report["environment"]
    for key in ("hostname", "gpu", "torch", "cuda", "commit", "date", "mode", "argv"):
        assert key in env
    assert env["gpu"] == "cpu" and env["mode"] == "benchmark" and "--compare" in env["argv"]
    assert report["impls"] == ["qr2", "torch"]
    assert report["settings"]["max_repeats"] == {"qr2": 3, "torch": 3}
    assert report["settings"]["mode_rules"]["budget_ns"] == 10e9
    assert len(report["cases"]) == 2
    first = report["cases"][0]
    assert (first["batch"], first["n"], first["cond"], first["seed"], first["case"]) == (2, 16, 1, 1, "dense")
    assert first["inputs"] == reference.benchmark_count(2, 16)
    for case in report["cases"]:
        assert case["speedup"] > 0
        for impl in ("qr2", "torch"):
            result = case["results"][impl]
            assert result["status"] == "pass"
            assert result["runs"] == 3
            for key in ("mean_ns", "std_ns", "err_ns", "best_ns", "worst_ns"):
                assert result[key] >= 0
            assert result["best_ns"] <= result["mean_ns"] <= result["worst_ns"]
            assert "scaled_factor_residual" in result["residuals"]
            assert "scaled_orthogonality_residual" in result["residuals"]
            # untimed pass + 3 rechecked iterations, one check per input
            assert result["checks"] == 4 * case["inputs"]
    summary = report["summary"]
    assert summary["passed"] is True
    assert summary["impls"]["qr2"]["geomean_ns"] > 0 and summary["geomean_speedup"] > 0


def test_qr_op_end_to_end(capsys, tmp_path):
    """--op qr times qr2_op.qr against torch.linalg.qr under the same rules and checks (Q, R) by the same gates."""
    path = tmp_path / "qr.json"
    code, out = run_main(capsys, *TINY, "--op", "qr", "--compare", "--json-out", str(path))
    assert code == 0, out
    assert "op=qr" in out and "geomean speedup (torch / qr2):" in out and "result: pass" in out
    report = json.loads(path.read_text())
    assert report["settings"]["op"] == "qr"
    assert all(c["results"][impl]["status"] == "pass" for c in report["cases"] for impl in ("qr2", "torch"))


def test_qr_op_fails_a_wrong_q(capsys, monkeypatch):
    def identity_q(A):
        Q, R = torch.linalg.qr(A)
        return torch.eye(*Q.shape[-2:]).expand_as(Q).contiguous(), R

    ops = dict(benchmark.OPS)
    ops["qr"] = benchmark.Op({"qr2": lambda: identity_q, "torch": lambda: torch.linalg.qr}, reference.check_qr)
    monkeypatch.setattr(benchmark, "OPS", ops)
    code, out = run_main(capsys, "--cpu", "--mode", "test", "--op", "qr", "--case", "2,8,1,dense,3")
    assert code == 1 and "R - Q.T @ A is too large" in out


@pytest.mark.parametrize("op", ["orgqr", "ormqr"])
def test_householder_ops_end_to_end(capsys, tmp_path, op):
    """--op orgqr / ormqr time qr2's operator against torch's on reflectors made before the timed calls, and check
    them by QR2's gates."""
    path = tmp_path / f"{op}.json"
    code, out = run_main(capsys, *TINY, "--op", op, "--compare", "--json-out", str(path))
    assert code == 0, out
    assert f"op={op}" in out and "result: pass" in out
    report = json.loads(path.read_text())
    assert all(c["results"][impl]["status"] == "pass" for c in report["cases"] for impl in ("qr2", "torch"))


def test_householder_checks_fail_wrong_outputs():
    A = torch.randn(3, 6, 6)
    H, tau = torch.geqrf(A)
    Q = torch.linalg.householder_product(H, tau)
    assert reference.check_orgqr(A, ((H, tau), Q))[0]
    assert "too large" in reference.check_orgqr(A, ((H, tau), torch.eye(6).expand_as(Q).contiguous()))[1]
    X = torch.ormqr(H, tau, A, True, True)
    assert reference.check_ormqr(A, ((H, tau, A), X))[0]
    assert "too large" in reference.check_ormqr(A, ((H, tau, A), torch.ormqr(H, tau, A, True, False)))[1]


def test_check_qr_rejects_shapes_and_lower_entries():
    A = torch.randn(3, 6, 4)
    Q, R = torch.linalg.qr(A)
    assert reference.check_qr(A, (Q, R))[0]
    assert reference.check_qr(A, (Q, R[:, :3])) == (False, "R shape must be (3, 4, 4), got (3, 3, 4)")
    assert reference.check_qr(A, (Q, R + torch.tril(torch.ones_like(R), -1))) == (False, "R is not upper triangular")
    assert not reference.check_qr(A, (Q.double(), R))[0]
    assert reference.check_qr(A, [Q, R]) == (False, "output must be a tuple `(Q, R)`")


def test_test_mode_with_custom_cases(capsys):
    code, out = run_main(capsys, "--cpu", "--mode", "test", "--case", "3,16,2,mixed,4", "--case", "2,8,0,upper,1")
    assert code == 0, out
    assert "qr2: 2/2 passed" in out
    assert "mean" not in out  # test mode times nothing


def test_leaderboard_mode_and_secret_seed(capsys, tmp_path):
    path = tmp_path / "lb.json"
    code, out = run_main(capsys, "--cpu", "--mode", "leaderboard", "--max-repeats", "3", "--secret-seed", "7",
                         "--case", "2,8,1,band,1029", "--json-out", str(path))
    assert code == 0, out
    report = json.loads(path.read_text())
    assert report["cases"][0]["seed"] == reference.combine_seed(1029, 7)
    assert "warm-up" in out


def test_torch_max_repeats(capsys, tmp_path):
    path = tmp_path / "r.json"
    code, out = run_main(capsys, "--cpu", "--max-repeats", "4", "--torch-max-repeats", "3", "--compare",
                         "--case", "2,8,1,dense,1", "--json-out", str(path))
    assert code == 0, out
    report = json.loads(path.read_text())
    assert report["settings"]["max_repeats"] == {"qr2": 4, "torch": 3}
    # QR2's stop rule may end a run after its third repeat (min. 3) once the timings are precise enough, so qr2's
    # count depends on the machine's load; torch's cap of 3 is reached either way
    results = report["cases"][0]["results"]
    assert 3 <= results["qr2"]["runs"] <= 4 and results["torch"]["runs"] == 3


def test_broken_impl_fails_in_process(capsys, tmp_path):
    path = tmp_path / "b.json"
    code, out = run_main(capsys, *TINY, "--impl", "broken-for-tests", "--json-out", str(path))
    assert code != 0
    assert "FAIL" in out and "R - Q.T @ A is too large" in out and "result: FAIL" in out
    report = json.loads(path.read_text())
    assert report["summary"]["passed"] is False
    assert report["cases"][0]["results"]["broken-for-tests"]["status"] == "fail"
    assert "mean_ns" not in report["cases"][0]["results"]["broken-for-tests"]  # no timing claim


def test_leaderboard_stops_at_first_failure(capsys):
    code, out = run_main(capsys, "--cpu", "--mode", "leaderboard", "--max-repeats", "3", "--impl", "broken-for-tests",
                         "--case", "2,8,1,dense,1", "--case", "2,8,1,dense,2")
    assert code != 0
    assert "skipped" in out


def test_bad_arguments_exit_2(capsys):
    for bad in (["--case", "1,2,3"], ["--case", "2,8,1,nosuch,1"], ["--impl", "nosuch"],
                ["--impl", "torch", "--compare"], ["--max-repeats", "0"], ["--floor"], ["--floor", "--mode", "test"],
                ["--op", "nosuch"], ["--op", "qr", "--impl", "broken-for-tests"]):
        with pytest.raises(SystemExit) as exc:
            benchmark.main(["--cpu", *bad])
        assert exc.value.code == 2


# ---------------------------------------------------------------------------------------------
# End to end, as a program
# ---------------------------------------------------------------------------------------------


def test_cli_exit_status_for_broken_impl():
    done = subprocess.run(
        [sys.executable, "benchmark.py", "--cpu", "--max-repeats", "2", "--case", "2,8,1,dense,1",
         "--impl", "broken-for-tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL" in done.stdout


def test_help_hides_the_test_only_impl():
    done = subprocess.run([sys.executable, "benchmark.py", "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0
    assert "--compare" in done.stdout and "--torch-max-repeats" in done.stdout
    assert "broken" not in done.stdout


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def test_calculate_stats_known_values():
    s = benchmark.calculate_stats([1.0, 2.0, 3.0, 4.0])
    assert s.runs == 4 and s.mean == 2.5 and s.best == 1.0 and s.worst == 4.0
    assert s.std == pytest.approx(math.sqrt(5.0 / 3.0))  # sample std: sum of squares 5 over n - 1
    assert s.err == pytest.approx(math.sqrt(5.0 / 3.0) / 2.0)
    one = benchmark.calculate_stats([7.0])
    assert (one.runs, one.mean, one.std, one.err) == (1, 7.0, 0.0, 0.0)


def test_stop_rule():
    steady = [100.0] * 3  # zero error
    assert not benchmark.should_stop(1, 1e9, steady, 1e12)  # too few iterations
    assert not benchmark.should_stop(2, 0.05e9, steady, 1e12)  # too little wall time
    assert benchmark.should_stop(2, 0.2e9, steady, 1e12)  # precise enough
    noisy = [100.0, 200.0, 300.0]  # err / mean = 0.19
    assert not benchmark.should_stop(2, 0.2e9, noisy, 1e12)
    assert benchmark.should_stop(2, 0.2e9, noisy, 500.0)  # mean * runs = 600 > budget
    assert not benchmark.should_stop(2, 0.2e9, noisy, 600.0)  # not strictly over
    assert benchmark.should_stop(2, 121e9, noisy, 1e12)  # wall-time limit


def test_geometric_mean_and_format_time():
    assert benchmark.geometric_mean([1.0, 100.0]) == pytest.approx(10.0)
    assert benchmark.geometric_mean([]) is None
    assert benchmark.format_time(512) == "512 ns"
    assert benchmark.format_time(12_900) == "12.90 µs"
    assert benchmark.format_time(2_621_300) == "2.621 ms"
    assert benchmark.format_time(1.5e9) == "1.500 s"
    assert benchmark.format_time(None) == "-"


def test_parse_case_and_defaults():
    case = benchmark.parse_case("640,512,2,Mixed,770001")
    assert case == benchmark.Case(640, 512, 2, 770001, "mixed")
    assert case.spec == "batch: 640; n: 512; cond: 2; seed: 770001; case: mixed"
    assert len(benchmark.default_cases("test")) == 22
    assert len(benchmark.default_cases("benchmark")) == 12
    assert benchmark.default_cases("leaderboard") == benchmark.default_cases("benchmark")
    remapped = benchmark.apply_secret_seed([case], 7)[0]
    assert remapped.seed == reference.combine_seed(770001, 7) and remapped.batch == 640


def test_mode_rules_match_qr2():
    b, lb = benchmark.MODE_RULES["benchmark"], benchmark.MODE_RULES["leaderboard"]
    assert (b.warmup_all_cases, b.warmup_repeats, b.warmup_budget_ns, b.repeats, b.budget_ns) == (False, 200, 1e8, 200, 1e10)
    assert (lb.warmup_all_cases, lb.warmup_repeats, lb.warmup_budget_ns, lb.repeats, lb.budget_ns) == (True, 1000, 5e8, 1000, 3e10)
    assert lb.stop_at_first_failure and not b.stop_at_first_failure


def test_make_inputs_uses_shifted_seeds():
    case = benchmark.Case(2, 8, 1, 100, "dense")
    inputs = benchmark.make_inputs(case, "cpu")
    assert len(inputs) == reference.benchmark_count(2, 8) == 50
    assert torch.equal(inputs[0], reference.generate_input(2, 8, 1, 142, "dense", device="cpu"))
    assert torch.equal(inputs[1], reference.generate_input(2, 8, 1, 184, "dense", device="cpu"))


def test_run_benchmark_case_detects_in_place_mutation():
    # The timed loop reuses the original inputs, so an implementation that overwrites A fails the recheck.
    def mutating(A):
        H, tau = torch.geqrf(A)
        A.mul_(2.0)
        return H, tau

    result = benchmark.run_benchmark_case("mutating", mutating, benchmark.Case(2, 8, 1, 3), "cpu",
                                          recheck=True, max_repeats=3, budget_ns=1e9)
    assert result.status == "fail" and result.stats is None


def test_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    code, out = run_main(capsys, "--cpu", "--max-repeats", "2", "--compare", "--case", "2,8,1,dense,1",
                         "--plot", str(path))
    assert code == 0, out
    assert path.stat().st_size > 0


# ---------------------------------------------------------------------------------------------
# The floor (--floor): timed, never judged
# ---------------------------------------------------------------------------------------------


def test_unjudged_checker_runs_the_check_and_answers_true():
    A = torch.randn(2, 8, 8, dtype=torch.float32)
    garbage = (torch.zeros(2, 8, 8), torch.ones(2, 8))
    judged = benchmark.CaseResult("qr2", "pass")
    assert not benchmark.Checker(judged).check(A, garbage) and judged.status == "fail"
    unjudged = benchmark.CaseResult("floor", "unjudged")
    checker = benchmark.Checker(unjudged, judged=False)
    assert checker.check(A, garbage) and checker.check(A, garbage)
    assert unjudged.status == "unjudged" and unjudged.checks == 2 and unjudged.residuals == {}


def test_summary_counts_the_floor_apart():
    cases = [benchmark.parse_case("2,8,1,dense,1")]
    stats = benchmark.calculate_stats([2000.0, 2200.0, 2100.0])
    floor = benchmark.calculate_stats([1000.0, 1100.0, 1050.0])
    table = [{"qr2": benchmark.CaseResult("qr2", "pass", stats=stats),
              "torch": benchmark.CaseResult("torch", "pass", stats=stats),
              "floor": benchmark.CaseResult("floor", "unjudged", stats=floor)}]
    totals = benchmark.summary(cases, table, ["qr2", "torch", "floor"], timed=True)
    assert totals["passed"]
    assert totals["impls"]["floor"]["geomean_ns"] == pytest.approx(floor.mean)
    assert totals["geomean_speedup"] == pytest.approx(1.0)  # qr2 against torch: the floor takes no part
    text = benchmark.results_table(cases, table, ["qr2", "torch", "floor"], timed=True)
    floor_row = next(line for line in text.splitlines() if " floor " in f" {line} ")
    assert benchmark.format_time(floor.mean) in floor_row and "pass" not in floor_row
    table[0]["floor"] = benchmark.CaseResult("floor", "fail", message="raised RuntimeError: x")
    totals = benchmark.summary(cases, table, ["qr2", "torch", "floor"], timed=True)
    assert totals["passed"] and totals["impls"]["floor"]["failed"] == 1  # reported, not a verdict
    table[0]["qr2"] = benchmark.CaseResult("qr2", "fail", message="wrong")
    assert not benchmark.summary(cases, table, ["qr2", "torch", "floor"], timed=True)["passed"]


def test_the_floor_is_not_an_implementation_to_pick(capsys):
    with pytest.raises(SystemExit) as exc:
        benchmark.main(["--cpu", "--impl", "floor"])
    assert exc.value.code == 2


def test_leaderboard_stops_the_floor_with_the_last_judged_implementation(capsys):
    args = benchmark.parse_args(["--cpu", "--mode", "leaderboard", "--max-repeats", "2"])
    cases = [benchmark.parse_case(f"2,8,1,dense,{seed}") for seed in (1, 2, 3)]
    fns = {"broken-for-tests": benchmark._broken_geqrf, "floor": torch.geqrf}
    table = benchmark.run_cases(fns, cases, "cpu", "leaderboard", args)
    assert table[0]["broken-for-tests"].status == "fail"
    assert table[0]["floor"].status == "skipped"  # the run has stopped: no floor for it either
    for later in table[1:]:
        assert later["broken-for-tests"].status == "skipped" and later["floor"].status == "skipped"
    fns = {"torch": torch.geqrf, "floor": torch.geqrf}  # nothing fails: the floor runs every case
    table = benchmark.run_cases(fns, cases, "cpu", "leaderboard", args)
    assert all(row["floor"].status == "unjudged" and row["floor"].stats.runs == 2 for row in table)


def test_the_floor_restores_the_route_table_when_its_loop_raises(monkeypatch):
    import qr2_op

    calls = []
    monkeypatch.setattr(qr2_op, "_force_config", lambda name: calls.append(name))

    def raising(A):
        if calls and calls[-1] == "empty_kernel":
            raise RuntimeError("boom")
        return torch.geqrf(A)

    case = benchmark.parse_case("2,8,1,dense,1")
    result = benchmark.run_benchmark_case("floor", raising, case, "cpu", recheck=True, max_repeats=2, budget_ns=1e9)
    assert result.status == "fail" and "boom" in result.message
    assert calls == ["empty_kernel", None]


@requires_cuda
def test_floor_runs_the_empty_kernel_and_restores_the_table(capsys, tmp_path):
    import qr2_op

    path = tmp_path / "floor.json"
    code, out = run_main(capsys, "--mode", "benchmark", "--compare", "--floor", "--max-repeats", "3",
                         "--torch-max-repeats", "2", "--case", "4,16,1,dense,3", "--json-out", str(path))
    assert code == 0, out
    report = json.loads(path.read_text())
    assert report["impls"] == ["qr2", "torch", "floor"]
    floor = report["cases"][0]["results"]["floor"]
    assert floor["status"] == "unjudged" and floor["runs"] >= 3 and floor["mean_ns"] > 0 and floor["checks"] > 0
    assert report["cases"][0]["results"]["qr2"]["status"] == "pass"
    # the forced route is cleared: the op factors again
    A = torch.randn(4, 16, 16, device="cuda")
    assert reference.check_implementation(A, qr2_op.geqrf(A))[0]
    # while the floor is set up, a call launches the empty kernel and nothing else
    with benchmark.impl_setup("floor"):
        qr2_op.geqrf(A)
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            H, tau = qr2_op.geqrf(A)
            torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "empty_kernel" in kernels[0], kernels
    assert H.shape == A.shape and tau.shape == (4, 16)
    assert reference.check_implementation(A, qr2_op.geqrf(A))[0]
