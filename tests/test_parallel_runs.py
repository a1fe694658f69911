"""The suite's own machinery for running in parallel (``pytest -n auto``, tests/conftest.py): how many
processes ``-n auto`` starts, and the site built once for all of them."""

import conftest
from conftest import CORES, memory_bytes, pytest_xdist_auto_num_workers, settle_once


def test_auto_workers_follow_pytest_xdists_variable_where_set(monkeypatch):
    """pytest-xdist documents ``$PYTEST_XDIST_AUTO_NUM_WORKERS`` as what ``-n auto`` starts: the suite's own
    count (cores, memory) leaves the answer to pytest-xdist's hook there, and gives one elsewhere."""
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "3")
    assert pytest_xdist_auto_num_workers(None) is None
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS")
    assert 1 <= pytest_xdist_auto_num_workers(None) <= 8
    # a process per core, at most 8, at most one per 3 GB (and one where the memory is less)
    for memory, workers in ((2e9, 1), (7e9, min(CORES, 2)), (1e12, min(CORES, 8)), (None, min(CORES, 8))):
        monkeypatch.setattr(conftest, "memory_bytes", lambda memory=memory: memory)
        assert pytest_xdist_auto_num_workers(None) == workers, memory


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


def test_the_memory_is_a_containers_limit_where_that_is_less(tmp_path):
    """-n auto counts a worker per 3 GB of the memory this process may use: a container's limit (cgroup
    v2's memory.max, v1's limit_in_bytes) where it is less than the machine's, the machine's where the
    limit is "max" or larger, or unreadable."""
    machine = memory_bytes(())
    assert machine and machine > 2**20
    v2, v1 = tmp_path / "memory.max", tmp_path / "limit_in_bytes"
    v2.write_text("max\n")
    v1.write_text(f"{2**30}\n")
    assert memory_bytes((v2,)) == machine and memory_bytes((tmp_path / "none",)) == machine
    assert memory_bytes((v2, v1)) == 2**30
    v1.write_text(f"{machine * 4}\n")
    assert memory_bytes((v1,)) == machine
