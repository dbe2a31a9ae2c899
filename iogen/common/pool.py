"""iogen's one thread pool: N named threads, each with its own reused state (a buffer, a client),
the first failure stops the rest, and a stop that an interrupt cannot cut short.

    pool = ThreadPool(4, name="iogen-copy", setup=lambda k: aligned_buffer(...))   # made once
    try:
        pool.run(copy_one, jobs, done=count)     # fn(job, buffer) on the threads; returns when all
        pool.run(copy_one, more_jobs)            # are done; the first failure is raised
        results, stop = pool.results(fn, tasks)  # or results in completion order, consumed here
        pool.submit(done_queue, fn, *args)       # or one call, its result (or Failed) to a queue
    finally:
        pool.close()

    results, stop = run_on_threads(write_one, tasks, workers=4, name="iogen-gen")  # a pool for one run

Each thread takes the next task itself (from one shared iterator, under a lock), so memory is
O(threads), not a future per task (a million files, a million futures). The calls the threads
make go through C-level queues (queue.SimpleQueue): queue.Queue and Future run their Condition
logic in Python bytecode. Waiting for threads counts the ones that ended (Countdown, a plain lock
and a list) rather than join() them: a join() interrupted by a signal handler's exception may
report a running thread as stopped (CPython's bpo-45274 clean-up), after which join() returns
without waiting; and a Semaphore's Condition can break when two such exceptions unwind through it.
"""
from __future__ import annotations

import queue
import threading
import time


class Failed:
    """What a submitted call that raised hands to its queue instead of a result."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException):
        self.exc = exc


class Countdown:
    """How many times other threads called release(); wait_for(n) returns once n calls came.

    A list (append is atomic) and one plain lock, with no threading.Condition: a signal handler's
    exception (Ctrl-C) raised in the waiting thread leaves a plain lock either taken or not, while
    two of them unwinding through a Condition's wait (threading.Semaphore's, threading.Event's) can
    leave the Condition's own lock released twice, and every later wait hangs or fails (CPython)."""

    __slots__ = ("_came", "_wake", "waits")

    def __init__(self):
        self._came: list = []
        self._wake = threading.Lock()
        self._wake.acquire()  # taken while nothing new came: release() frees it, the waiter takes it
        self.waits = 0  # how often wait_for was entered (tests send their signals once a waiter is in)

    def release(self) -> None:
        self._came.append(None)
        try:
            self._wake.release()
        except RuntimeError:  # already free: the waiter has not taken an earlier wake-up yet
            pass

    def count(self) -> int:
        return len(self._came)

    def wait_for(self, n: int) -> None:
        """Return once release() was called n times in all (since the Countdown was made)."""
        self.waits += 1
        while len(self._came) < n:
            self._wake.acquire(timeout=0.5)  # the timeout only bounds a lost wake-up


def acquire_through_interrupts(ended: Countdown, count: int = 1) -> None:
    """ended.wait_for(count), which a Ctrl-C (or another signal's exception) does not cut short:
    a clean-up after an interrupt waits for the threads' work in flight (one task each, bounded),
    so nothing half-written is left behind by a thread still running."""
    while True:
        try:
            ended.wait_for(count)
            return
        except KeyboardInterrupt:
            continue


def wait_through_interrupts(event: threading.Event) -> None:
    """event.wait(), which a Ctrl-C (or another signal's exception) does not cut short."""
    while True:
        try:
            event.wait()
            return
        except KeyboardInterrupt:
            continue


class _Run:
    """One run of fn over tasks on some of the pool's threads."""

    def __init__(self, fn, tasks, threads: int, done, stop, batch_items: int = 1, batch_s: float = 0.05,
                 collect: bool = False, cancel: threading.Event | None = None):
        self.fn = fn
        self.cancel = cancel
        self.pending = iter(tasks)
        self.take = threading.Lock()
        self.lock = threading.Lock()  # done() is called under it
        self.halt = threading.Event()
        self.stop = stop
        self.done = done
        self.threads = threads
        self.ended = Countdown()
        self.errors: list[BaseException] = []
        self.collect = collect
        self.batch_items = batch_items
        self.batch_s = batch_s
        self.out = queue.SimpleQueue() if collect else None

    def stopped(self) -> bool:
        return self.halt.is_set() or (self.stop is not None and self.stop.is_set())

    def work(self, state) -> None:
        """One thread's share: take tasks until there are none left, a failure or a stop."""
        held = []
        since = time.monotonic()
        try:
            while not self.stopped():
                with self.take:
                    task = next(self.pending, _END)
                if task is _END:
                    break
                result = self.fn(task, state)
                if self.collect:
                    held.append(result)
                    if len(held) >= self.batch_items or time.monotonic() - since >= self.batch_s:
                        self.out.put((True, held))
                        held = []
                        since = time.monotonic()
                elif self.done is not None:
                    with self.lock:
                        self.done(task, result)
        except BaseException as exc:  # handed to the calling thread, which raises it
            self.halt.set()
            if self.cancel is not None:
                self.cancel.set()
            if self.collect:
                if held:
                    self.out.put((True, held))
                    held = []
                self.out.put((False, exc))
            else:
                with self.lock:
                    self.errors.append(exc)
        finally:
            if held:
                self.out.put((True, held))
            if self.collect:
                self.out.put(None)
            self.ended.release()

    def wait(self) -> None:
        """Wait (through interrupts) for every thread of this run to be done with it."""
        acquire_through_interrupts(self.ended, self.threads)


_END = object()


class ThreadPool:
    """`threads` threads named name-0, name-1, ..., each holding setup(k)'s state (made on the
    thread, before the constructor returns: buffers and clients are made outside a timed window).
    The threads stay until close(); every run reuses them and their state."""

    def __init__(self, threads: int, name: str = "iogen-work", setup=None):
        self.size = max(1, int(threads))
        self.name = name
        self._calls = queue.SimpleQueue()
        self._ended = Countdown()
        self._closed = False
        self.states: list = [None] * self.size
        self._local = threading.local()
        ready = Countdown()
        failed: list[BaseException] = []

        def thread(k: int) -> None:
            try:
                try:
                    state = setup(k) if setup is not None else None
                except BaseException as exc:  # raised by the constructor
                    failed.append(exc)
                    return
                self.states[k] = self._local.state = state
                ready.release()
                self._serve(state)
            finally:
                if failed:
                    ready.release()
                self._ended.release()

        self._threads = [threading.Thread(target=thread, args=(k,), name=f"{name}-{k}", daemon=True)
                         for k in range(self.size)]
        started = 0
        try:
            for t in self._threads:
                t.start()
                started += 1
            acquire_through_interrupts(ready, started)
        except BaseException:
            self._stop_threads(started)
            raise
        if failed:
            self._stop_threads(started)
            raise failed[0]

    def _serve(self, state) -> None:
        get = self._calls.get
        while True:
            call = get()
            if call is None:
                return
            if type(call) is _Run:
                call.work(state)
                continue
            done, fn, args = call
            try:
                done.put(fn(*args))
            except BaseException as exc:  # handed to the consumer, which raises it
                done.put(Failed(exc))

    def submit(self, done: queue.SimpleQueue, fn, *args) -> None:
        """Run fn(*args) on one of the threads; its result (or Failed(exception)) goes to `done`."""
        self._calls.put((done, fn, args))

    def state(self):
        """The calling thread's state (setup's value), called from one of the pool's threads."""
        return self._local.state

    def map(self, fn, items) -> list:
        """[fn(item) for item in items] computed on the threads, in items' order (as
        concurrent.futures' Executor.map, for code written against it); the first failure stops
        the rest and is raised once the running calls are done."""
        items = list(items)
        out = [None] * len(items)

        def one(k, _state):
            out[k] = fn(items[k])

        self.run(one, range(len(items)))
        return out

    def _start(self, run: _Run) -> _Run:
        for _ in range(run.threads):
            self._calls.put(run)
        return run

    def run(self, fn, tasks, *, done=None, stop: threading.Event | None = None, threads: int | None = None,
            cancel: threading.Event | None = None) -> None:
        """fn(task, state) for every task, on `threads` of the threads (all by default), each
        taking the next task itself; `done(task, result)` is called under a lock after each.

        The first failure stops the others (no thread starts another task) and is raised once the
        running tasks are done. `stop` set (say by another thread's interrupt): no new task
        starts, and this returns once the running ones are done. An interrupt of the calling
        thread waits for them too (through further interrupts), then is raised. `cancel`, an event
        the tasks watch (a multipart upload between its parts), is set at the first failure and at
        an interrupt, before the wait: long tasks stop early instead of finishing.
        """
        n = self.size if threads is None else max(1, min(self.size, int(threads)))
        r = self._start(_Run(fn, tasks, n, done, stop, cancel=cancel))
        try:
            r.ended.wait_for(r.threads)
        except BaseException:  # an interrupt while waiting: the threads stop after their task
            r.halt.set()
            if cancel is not None:
                cancel.set()
            r.wait()
            raise
        if r.errors:
            raise r.errors[0]

    def results(self, fn, tasks, *, batch_items: int = 1, batch_s: float = 0.05):
        """(iterator of fn(task, state)'s results in completion order, stop()).

        The results come back up to `batch_items` at a time (and at least every `batch_s`
        seconds): with short tasks, waking the calling thread for every result costs a GIL
        hand-off a task. The first failure is raised by the iterator, after the results finished
        before it, and no thread starts another task; stop() (through interrupts) waits for the
        running ones.
        """
        r = self._start(_Run(fn, tasks, self.size, None, None, batch_items, batch_s, collect=True))

        def results():
            running = r.threads
            while running:
                item = r.out.get()
                if item is None:
                    running -= 1
                elif item[0]:
                    yield from item[1]
                else:
                    raise item[1]

        def stop():
            r.halt.set()
            r.wait()

        return results(), stop

    def _stop_threads(self, started: int) -> None:
        for _ in range(started):
            self._calls.put(None)
        acquire_through_interrupts(self._ended, started)

    def close(self) -> None:
        """Stop the threads once the queued work is done (through interrupts); their state goes."""
        if self._closed:
            return
        self._closed = True
        self._stop_threads(len(self._threads))
        self.states = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def run_on_threads(run, tasks, workers: int, name: str = "iogen-work", batch_items: int = 1,
                   batch_s: float = 0.05):
    """(iterator of run(task)'s results in completion order, stop()) over `workers` threads of a
    pool made for this one run (ThreadPool.results); stop() also ends the threads."""
    pool = ThreadPool(workers, name)
    try:
        results, stop_run = pool.results(lambda task, _state: run(task), tasks, batch_items=batch_items,
                                         batch_s=batch_s)
    except BaseException:
        pool.close()
        raise

    def stop():
        try:
            stop_run()
        finally:
            pool.close()

    return results, stop
