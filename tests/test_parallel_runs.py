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


def test_the_longest_tests_start_first_each_worker_with_its_share(monkeypatch):
    """Under -n, each worker's first run of tests (pytest-xdist's ``--dist load`` hands out consecutive
    ones) starts with its share of the longest, longest first, dealt to the worker with the fewest seconds
    so far; every test stays, once, the others in their order; a test that takes a fixture of its module
    (it would set it up again) or the site (it waits on its build) stays where it was collected."""
    from types import SimpleNamespace

    def item(name, scope="function", fixtures=()):
        definitions = {"f": [SimpleNamespace(scope=scope)]}
        return SimpleNamespace(nodeid=f"tests/test_x.py::{name}", fixturenames=("f", *fixtures),
                               _fixtureinfo=SimpleNamespace(name2fixturedefs=definitions))

    monkeypatch.setattr(conftest, "LONGEST", {f"tests/test_x.py::{k}": v for k, v in
                                              {"a": 100, "b": 60, "c": 50, "d": 30, "e": 5, "mod": 500, "site": 400,
                                               "gone": 1000}.items()})
    items = [item(f"s{n}") for n in range(20)] + [item("e"), item("c"), item("mod", "module"), item("d[1]"),
                                                  item("site", fixtures=("site",)), item("a"), item("b")]
    ordered = conftest.longest_first(items, 2)
    names = [i.nodeid.split("::")[1] for i in ordered]
    assert sorted(names) == sorted(i.nodeid.split("::")[1] for i in items)
    first = len(items) // 2 // 4  # 3: the first run each worker is handed
    # a (100) to the first; b (60) and c (50) to the second (110); d (30) to the first (130); e to the second
    assert names[:first] == ["a", "d[1]", "s0"] and names[first:2 * first] == ["b", "c", "e"]
    rest = [n for n in names[2 * first:]]
    assert rest == [f"s{n}" for n in range(1, 20)] + ["mod", "site"]
    assert conftest.longest_first(items, 1) == items
