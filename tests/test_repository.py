"""The tracked files carry no work-order labels: no file is named after a work session (`-s12`, "session") and no text
speaks of sessions, of numbered or ordinal ones ("nineteenth session", "Session 2"), or of a "device tool". CPU only:
it reads `git ls-files` from the repository root."""
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIS_FILE = os.path.relpath(os.path.abspath(__file__), ROOT).replace(os.sep, "/")

PATH_SUFFIX = re.compile(r"-s\d+(?=[-._/]|$)")  # e.g. leaderboard-s4.json, host-path-s3-final.json
PATH_WORD = re.compile(r"session", re.IGNORECASE)
ORDINALS = ("first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|"
            "fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|\\d+(?:st|nd|rd|th)")
TEXT_LABELS = [  # the most specific first: a line is reported with the first label it matches
    ("an ordinal session", re.compile(rf"\b(?:{ORDINALS})[- ]sessions?\b", re.IGNORECASE)),
    ("a numbered session", re.compile(r"\bsessions?[- ]?#?\d+\b", re.IGNORECASE)),
    ("the word session", re.compile(r"\bsessions?\b", re.IGNORECASE)),
    ("the phrase device tool", re.compile(r"\bdevice[- ]tools?\b", re.IGNORECASE)),
]
MAX_REPORTED = 200


def tracked_files():
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    if not os.path.exists(os.path.join(ROOT, ".git")):
        pytest.skip("not a git checkout (no .git)")
    done = subprocess.run([git, "ls-files", "-z"], cwd=ROOT, capture_output=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"git ls-files failed: {done.stderr.decode(errors='replace').strip()}")
    return sorted(p for p in done.stdout.decode("utf-8", errors="surrogateescape").split("\0") if p)


def read_text(path):
    """The file's text, or None for a binary file or one missing from the working tree."""
    try:
        with open(os.path.join(ROOT, path), "rb") as f:
            data = f.read()
    except (FileNotFoundError, IsADirectoryError):
        return None  # deleted in the working tree, or a submodule
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def report(hits, what):
    shown = "\n".join(hits[:MAX_REPORTED])
    more = f"\n... and {len(hits) - MAX_REPORTED} more" if len(hits) > MAX_REPORTED else ""
    return f"{len(hits)} {what}:\n{shown}{more}"


def test_no_tracked_path_is_named_after_a_session():
    hits = []
    for path in tracked_files():
        if path == THIS_FILE:
            continue
        if PATH_SUFFIX.search(path) or PATH_WORD.search(path):
            hits.append(path)
    assert not hits, report(hits, "tracked path(s) carry a session suffix (like -s12) or the word 'session'")


def test_no_tracked_text_carries_work_order_labels():
    hits = []
    for path in tracked_files():
        if path == THIS_FILE:
            continue
        text = read_text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for label, pattern in TEXT_LABELS:
                found = pattern.search(line)
                if found:
                    hits.append(f"{path}:{number}: {label} ({found.group(0)!r}): {line.strip()[:160]}")
                    break
    assert not hits, report(hits, "line(s) in tracked files carry work-order labels")
