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


def run_on_threads(run, tasks, workers: int, name: str = "iogen-work"):
    """(iterator of run(task)'s results in completion order, stop()) over `workers` threads.

    Each thread takes the next task itself and hands its result back through one queue. The
    first failure (any exception of run) is raised by the iterator and no thread starts another
    task; stop() waits for the running ones. Threads are named name_0, name_1, ...
    """
    pending = iter(tasks)
    take = threading.Lock()
    halt = threading.Event()
    done = queue.SimpleQueue()

    def worker():
        try:
            while not halt.is_set():
                with take:
                    task = next(pending, None)
                if task is None:
                    break
                done.put((True, run(task)))
        except BaseException as exc:  # handed to the calling thread, which raises it
            halt.set()
            done.put((False, exc))
        finally:
            done.put(None)

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
                yield item[1]
            else:
                raise item[1]

    def stop():
        halt.set()
        for thread in threads:
            thread.join()

    return results(), stop
