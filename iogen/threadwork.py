"""Run a function over many items on a few threads, results in completion order, in O(threads) memory.

    results, stop = run_on_threads(write_one, tasks, workers=4, name="iogen-gen")
    try:
        for value in results: ...       # in the calling thread (progress, counting)
    finally:
        stop()                          # an error or Ctrl-C: running items finish, no new one starts

concurrent.futures would hold a future per item (a million files, a million futures); here each
thread takes the next item itself and hands its result back through one queue.
"""
from __future__ import annotations

import queue
import threading
import time


def run_on_threads(run, tasks, workers: int, name: str = "iogen-work", batch_items: int = 1,
                   batch_s: float = 0.05):
    """(iterator of run(task)'s results in completion order, stop()) over `workers` threads.

    Each thread takes the next task itself and hands its results back through one queue, up to
    `batch_items` at a time (and at least every `batch_s` seconds): with short tasks, waking the
    calling thread for every result costs a GIL hand-off a task. The first failure (any exception
    of run) is raised by the iterator, after the results finished before it, and no thread starts
    another task; stop() waits for the running ones. Threads are named name_0, name_1, ...
    """
    pending = iter(tasks)
    take = threading.Lock()
    halt = threading.Event()
    done = queue.SimpleQueue()

    def worker():
        held = []
        since = time.monotonic()
        try:
            while not halt.is_set():
                with take:
                    task = next(pending, None)
                if task is None:
                    break
                held.append(run(task))
                if len(held) >= batch_items or time.monotonic() - since >= batch_s:
                    done.put((True, held))
                    held = []
                    since = time.monotonic()
        except BaseException as exc:  # handed to the calling thread, which raises it
            halt.set()
            if held:
                done.put((True, held))
                held = []
            done.put((False, exc))
        finally:
            if held:
                done.put((True, held))
            done.put(None)
            ended.release()

    # stop() counts the threads that ended on a semaphore rather than join() them: a join()
    # interrupted by a signal handler's exception may report a running thread as stopped
    # (CPython's bpo-45274 clean-up), after which join() returns without waiting.
    ended = threading.Semaphore(0)
    threads = [threading.Thread(target=worker, name=f"{name}_{k}") for k in range(workers)]
    for thread in threads:
        thread.start()

    def results():
        running = len(threads)
        while running:
            item = done.get()
            if item is None:
                running -= 1
            elif item[0]:
                yield from item[1]
            else:
                raise item[1]

    waited = [0]

    def stop():
        halt.set()
        while waited[0] < len(threads):
            try:
                ended.acquire()
            except KeyboardInterrupt:  # a second Ctrl-C: the running items still finish first
                continue
            waited[0] += 1

    return results(), stop
