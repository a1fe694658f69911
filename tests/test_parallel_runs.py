"""The suite's own machinery for running in parallel (``pytest -n auto``, tests/conftest.py): how many
processes ``-n auto`` starts, and the site built once for all of them."""

from conftest import pytest_xdist_auto_num_workers, settle_once


def test_auto_workers_follow_pytest_xdists_variable_where_set(monkeypatch):
    """pytest-xdist documents ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` as what ``-n auto`` starts: the suite's own
    count (cores, memory) leaves the answer to pytest-xdist's hook there, and gives one elsewhere."""
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytest_xdist_auto_num_workers(None) is None
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS")
    assert 1 <= pytest_xdist_auto_num_workers(None) <= 8


def test_a_failed_site_build_is_every_test_process_failure_at_once(tmp_path):
    """Under -n the first process that needs the site builds it: where that build fails, the next process
    fails with its message, without building again; where it succeeds, none builds again."""
    builds = []

    def failing():
        builds.append("failing")
        return "WARNING: undefined label: 'nowhere'"

    for _ in range(2):  # (two processes, one after the other under the lock)
        assert "undefined label: 'nowhere'" in settle_once(tmp_path / "failed", failing)
    for _ in range(2):
        assert settle_once(tmp_path / "built", lambda: builds.append("passing")) is None
    assert builds == ["failing", "passing"]
