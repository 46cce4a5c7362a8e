"""The README's commands are the ones CI runs."""
import os
import re

from conftest import ROOT


def bash_blocks():
    return re.findall(r"```bash\n(.*?)\n```", open(os.path.join(ROOT, "README.md")).read(), re.S)


def test_ci_runs_the_readme_test_command():
    test_cmds = [b for b in bash_blocks() if "pytest" in b]
    assert len(test_cmds) == 1
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert test_cmds[0].strip() in ci.splitlines()


def test_readme_main_job_runs_the_leaderboard():
    assert any("benchmark.py --mode leaderboard" in b for b in bash_blocks())
