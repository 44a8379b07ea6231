"""planner.forked.fork_map: the results of ``[fn(x) for x in parts]`` whatever happens to a forked child."""

from __future__ import annotations

import os

import pytest

import planner.forked as forked
from planner.forked import fork_map

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="fork_map forks only where os.fork exists")


def test_parts_run_in_a_child_and_come_back_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()
    out = fork_map(lambda x: (x * x, os.getpid() == parent), [1, 2, 3])
    assert [v for v, _ in out] == [1, 4, 9]
    assert [here for _, here in out] == [True, False, True]  # parts[1] in the child; parts[2] here (one extra core)


def test_a_failing_child_is_computed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()

    def fn(x: int) -> int:
        if os.getpid() != parent:
            raise RuntimeError("only in the child")
        return x + 1

    assert fork_map(fn, [10, 20]) == [11, 21]


def test_a_child_that_dies_is_computed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()

    def fn(x: int) -> int:
        if os.getpid() != parent:
            os._exit(3)
        return -x

    assert fork_map(fn, [1, 2]) == [-1, -2]


def test_an_error_here_stops_the_children_and_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()

    def fn(x: int) -> int:
        if os.getpid() == parent:
            raise ValueError("here")
        import time

        time.sleep(30)  # killed long before
        return x

    with pytest.raises(ValueError, match="here"):
        fork_map(fn, [1, 2])


def test_one_core_runs_everything_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 1)
    parent = os.getpid()
    assert fork_map(lambda x: os.getpid() == parent, [1, 2, 3]) == [True, True, True]


def test_a_fork_the_system_refuses_is_computed_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 4)

    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert fork_map(lambda x: 2 * x, [1, 2, 3, 4]) == [2, 4, 6, 8]


def test_parts_beyond_the_cores_are_computed_here_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 3)
    parent = os.getpid()
    out = fork_map(lambda x: (x, os.getpid() == parent), list(range(6)))
    assert [v for v, _ in out] == list(range(6))
    assert [here for _, here in out] == [True, False, False, True, True, True]


def test_an_error_while_collecting_stops_no_child_already_collected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that fails is computed here; if that raises, the children already collected (reaped, their pipe
    closed) are not stopped again: their pid or fd number may belong to something else by then."""
    monkeypatch.setattr(forked, "usable_cores", lambda: 3)
    stopped: list[int] = []
    monkeypatch.setattr(forked, "_stop", lambda pid, fd: stopped.append(pid))
    parent = os.getpid()

    def fn(x: int) -> int:
        if x == 2:
            if os.getpid() != parent:
                os._exit(3)
            raise ValueError("part 2")
        return x

    with pytest.raises(ValueError, match="part 2"):
        fork_map(fn, [0, 1, 2])
    assert stopped == []


def test_a_child_prints_nothing_and_calls_no_listener(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str],
                                                      tmp_path: pytest.TempPathFactory) -> None:
    """A child's prints and warnings go nowhere (fresh /dev/null streams, not the parent's, whose lock a thread of the
    parent may hold at the fork) and its stages reach no listener (planner.progress.detach); its result still does."""
    import sys
    import warnings

    from planner.progress import listening, stage

    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()
    heard: list[str] = []

    def fn(x: int) -> int:
        if os.getpid() != parent:
            print("child-stdout-marker")
            print("child-stderr-marker", file=sys.stderr)
            with warnings.catch_warnings():
                warnings.simplefilter("always")  # shown, not raised (the suite turns warnings into errors)
                warnings.warn("child-warning-marker", RuntimeWarning, stacklevel=1)
            with stage("child-stage"):
                pass
            return 1000 * len(heard) - x  # a listener called here (the parent's list, inherited) shows in the result
        return -x

    with listening(lambda event, label, s: heard.append(label)):
        assert fork_map(fn, [1, 2]) == [-1, -2]
    out, err = capfd.readouterr()
    assert "marker" not in out and "marker" not in err
    assert "child-stage" not in heard


def test_planner_cores_caps_the_cores_used(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()
    monkeypatch.setenv(forked.CORES_ENV, "1")
    assert forked.usable_cores() == 1
    assert fork_map(lambda x: os.getpid() == parent, [1, 2]) == [True, True]  # no child
    for bad in ("0", "-2", "two", ""):
        monkeypatch.setenv(forked.CORES_ENV, bad)
        assert forked.usable_cores() >= 1  # ignored: the machine's count
    monkeypatch.setenv(forked.CORES_ENV, "4096")
    assert forked.usable_cores() == len(os.sched_getaffinity(0))  # never above what the process may run on


def test_fork_each_deals_items_over_the_cores_and_keeps_their_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cores", lambda: 2)
    parent = os.getpid()
    seen: list[tuple[int, int, bool]] = []

    def fn(x: int) -> tuple[int, bool]:
        return x * 10, os.getpid() == parent

    out = forked.fork_each(fn, [0, 1, 2, 3, 4], done=lambda x, r, s, here: seen.append((x, r[0], here)))
    assert [r for r, _ in out] == [0, 10, 20, 30, 40]
    assert [here for _, here in out] == [True, False, True, False, True]  # items[0::2] here, items[1::2] in the child
    assert sorted(seen) == [(0, 0, True), (1, 10, False), (2, 20, True), (3, 30, False), (4, 40, True)]
    assert [here for _, here in forked.fork_each(fn, [0, 1, 2], parallel=False)] == [True, True, True]
    assert forked.fork_each(fn, []) == []
