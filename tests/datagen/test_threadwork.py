"""threadwork: the one pool (ThreadPool) and run_on_threads over it: every item once, the first
failure raised, a buffer a thread reused, no thread left behind, a wait an interrupt cannot cut short."""
import queue
import signal
import threading
import time

import pytest

from iogen.common.pool import Countdown, Failed, ThreadPool, acquire_through_interrupts, run_on_threads


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
    assert {name for _, name in seen} <= {"t-work-0", "t-work-1", "t-work-2"}
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


# ---- the pool itself: state per thread, runs, submit, a stop that an interrupt cannot cut short


def test_each_thread_keeps_its_own_state_across_runs():
    made = []

    def setup(k):
        made.append((k, threading.current_thread().name))
        return bytearray(16)  # a buffer, as the copies use

    seen = []
    with ThreadPool(3, name="t-state", setup=setup) as pool:
        assert sorted(made) == [(0, "t-state-0"), (1, "t-state-1"), (2, "t-state-2")]  # made before the first run
        for _ in range(2):
            pool.run(lambda task, buf: seen.append((threading.current_thread().name, id(buf))), range(300))
        assert len(seen) == 600
        by_thread = {}
        for name, buf in seen:
            by_thread.setdefault(name, set()).add(buf)
        assert all(len(bufs) == 1 for bufs in by_thread.values())  # one reused buffer a thread
        assert len({b for bufs in by_thread.values() for b in bufs}) == len(by_thread)
    assert len(made) == 3
    assert not [t for t in threading.enumerate() if t.name.startswith("t-state")]


def test_run_calls_done_for_every_task_and_raises_the_first_failure():
    done = []
    with ThreadPool(2, name="t-run") as pool:
        pool.run(lambda task, _: task + 1, range(100), done=lambda task, result: done.append((task, result)))
        assert sorted(done) == [(i, i + 1) for i in range(100)]
        started = []

        def fail(task, _):
            started.append(task)
            if task == 5:
                raise OSError(5, "bad task")
            time.sleep(0.001)

        with pytest.raises(OSError, match="bad task"):
            pool.run(fail, range(10_000))
        assert 5 in started and len(started) < 10_000
        # the pool is still usable after a failed run
        again = []
        pool.run(lambda task, _: again.append(task), range(10), threads=1)
        assert sorted(again) == list(range(10))


def test_a_stop_event_ends_the_run_after_the_running_tasks():
    stop = threading.Event()
    ran = []

    def one(task, _):
        ran.append(task)
        if task == 3:
            stop.set()

    with ThreadPool(1, name="t-stopev") as pool:
        pool.run(one, range(1000), stop=stop)
    assert ran == [0, 1, 2, 3]


def test_submit_hands_back_results_and_failures():
    done = queue.SimpleQueue()
    with ThreadPool(2, name="t-submit") as pool:
        pool.submit(done, lambda a, b: a + b, 2, 3)
        pool.submit(done, lambda: 1 // 0)
        got = [done.get(), done.get()]
    values = [g for g in got if not isinstance(g, Failed)]
    failures = [g.exc for g in got if isinstance(g, Failed)]
    assert values == [5] and len(failures) == 1 and isinstance(failures[0], ZeroDivisionError)


def test_a_failed_setup_is_raised_and_leaves_no_thread():
    def setup(k):
        if k == 1:
            raise MemoryError("no buffer")
        return k

    with pytest.raises(MemoryError, match="no buffer"):
        ThreadPool(3, name="t-setup", setup=setup)
    assert not [t for t in threading.enumerate() if t.name.startswith("t-setup")]


class _Interrupts:
    """A SIGINT handler of the test's own (not an inherited disposition) that raises
    KeyboardInterrupt in the main thread and counts how often it ran."""

    def __enter__(self):
        self.ran = threading.Semaphore(0)
        self.old = signal.signal(signal.SIGINT, self._handler)
        self.mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return self

    def _handler(self, *_):
        self.ran.release()
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)
        signal.signal(signal.SIGINT, self.old)

    def send(self):
        """From another thread: interrupt the main thread and wait until its handler ran."""
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # a real signal: it wakes a wait
        assert self.ran.acquire(timeout=60)


def test_an_interrupted_run_waits_for_the_running_task_then_raises():
    finished = threading.Event()
    with _Interrupts() as interrupts, ThreadPool(2, name="t-int") as pool:

        def one(task, _):
            if task == 0:
                interrupts.send()  # the main thread is in run()'s wait, or about to be
                time.sleep(0.05)  # still running when the KeyboardInterrupt reaches run()
                finished.set()
            else:
                time.sleep(0.001)

        with pytest.raises(KeyboardInterrupt):
            pool.run(one, range(10_000))
        assert finished.is_set()  # run() did not return before the task in flight was done


def test_a_second_interrupt_does_not_cut_the_wait_short():
    ended = Countdown()

    def waiting(n):
        """The main thread inside acquire_through_interrupts' wait, the n-th time (a new wait after an interrupt)."""
        while ended.waits < n:
            time.sleep(0.001)

    def interrupt_then_release():
        waiting(1)
        interrupts.send()
        waiting(2)  # the first interrupt was swallowed and the wait resumed
        interrupts.send()
        waiting(3)
        ended.release()

    with _Interrupts() as interrupts:
        helper = threading.Thread(target=interrupt_then_release)
        helper.start()
        acquire_through_interrupts(ended)  # returns (the interrupts are swallowed), does not raise
        helper.join()
    assert ended.count() == 1 and ended.waits == 3


def test_a_countdown_counts_every_release_of_many_threads():
    ended = Countdown()
    threads = [threading.Thread(target=lambda: [ended.release() for _ in range(200)]) for _ in range(4)]
    for t in threads:
        t.start()
    ended.wait_for(800)
    for t in threads:
        t.join()
    assert ended.count() == 800


def test_cancel_is_set_at_the_first_failure_so_long_tasks_stop_early():
    import threading

    from iogen.common.pool import ThreadPool

    cancel = threading.Event()
    saw_cancel = []

    def task(k, _state):
        if k == 0:
            raise RuntimeError("object 0 failed")
        saw_cancel.append(cancel.wait(60))  # a long upload that checks cancel between its parts

    with ThreadPool(2) as pool:
        with pytest.raises(RuntimeError, match="object 0 failed"):
            pool.run(task, [0, 1], cancel=cancel)
    assert saw_cancel in ([], [True])  # task 1 stopped early (or never started), never waited out
