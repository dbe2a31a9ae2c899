"""threadwork.run_on_threads: every item once, the first failure raised, no thread left behind."""
import threading
import time

import pytest

from iogen.threadwork import run_on_threads


def test_every_item_runs_once_on_the_named_threads():
    seen = []

    def run(item):
        seen.append((item, threading.current_thread().name))
        return item * 2

    results, stop = run_on_threads(run, range(500), 3, name="t-work")
    try:
        got = list(results)
    finally:
        stop()
    assert sorted(got) == [2 * i for i in range(500)]
    assert sorted(i for i, _ in seen) == list(range(500))
    assert {name for _, name in seen} <= {"t-work_0", "t-work_1", "t-work_2"}
    assert not [t for t in threading.enumerate() if t.name.startswith("t-work")]


def test_the_first_failure_is_raised_and_no_new_item_starts():
    started = []

    def run(item):
        started.append(item)
        if item == 3:
            raise OSError(5, "bad item")
        time.sleep(0.001)
        return item

    results, stop = run_on_threads(run, range(10_000), 2, name="t-fail")
    with pytest.raises(OSError, match="bad item"):
        try:
            list(results)
        finally:
            stop()
    assert 3 in started and len(started) < 10_000
    assert not [t for t in threading.enumerate() if t.name.startswith("t-fail")]


def test_stopping_early_lets_running_items_finish():
    finished = []

    def run(item):
        time.sleep(0.002)
        finished.append(item)
        return item

    results, stop = run_on_threads(run, range(10_000), 2, name="t-stop")
    first = next(results)
    stop()
    assert first in finished and len(finished) < 10_000
    assert not [t for t in threading.enumerate() if t.name.startswith("t-stop")]


def test_batched_results_keep_every_item_and_the_items_before_a_failure():
    def run(item):
        if item == 100:
            raise ValueError("item 100")
        return item

    got = []
    results, stop = run_on_threads(run, range(101), 1, name="t-batch", batch_items=32, batch_s=60)
    with pytest.raises(ValueError, match="item 100"):
        try:
            for value in results:
                got.append(value)
        finally:
            stop()
    assert got == list(range(100))  # 3 full batches and the partial one, handed over before the error
