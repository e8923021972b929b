"""``versions.commit`` in every config.json: the rolloutlab source commit a result came from."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from rolloutlab.sim.scenario import provenance

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout (a source tarball)")
def test_the_commit_is_the_checkouts_head():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    got = provenance.library_versions()["commit"]
    assert got is not None and got.removesuffix("+dirty") == head[:12]


def test_no_git_means_no_commit_and_no_error(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    provenance.source_commit.cache_clear()
    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    try:
        assert provenance.library_versions()["commit"] is None
    finally:
        provenance.source_commit.cache_clear()


def test_a_source_outside_a_checkout_records_no_commit(tmp_path, monkeypatch):
    # an installed copy inside another git repository must not report that repository's commit
    fake = tmp_path / "site-packages" / "rolloutlab" / "sim" / "scenario" / "provenance.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    provenance.source_commit.cache_clear()
    monkeypatch.setattr(provenance, "__file__", str(fake))
    try:
        assert provenance.source_commit() is None
    finally:
        provenance.source_commit.cache_clear()
