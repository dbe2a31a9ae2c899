"""Request figures merged across drains and ranks, on hand-made counts (no server)."""
import numpy as np

from iogen.metrics.requests import merge_figures
from iogen.storage.figures import OpStats


def _stats(requests, nbytes, retries, throttled, latencies_ns):
    s = OpStats()
    s.requests, s.bytes, s.retries, s.throttled = requests, nbytes, retries, throttled
    s.first_byte.record(np.array(latencies_ns, np.int64) // 2)
    s.total.record(np.array(latencies_ns, np.int64))
    return s.to_dict()


def test_merge_sums_counts_and_merges_histograms_exactly():
    a = {"get": _stats(2, 2000, 1, 1, [1_000_000, 3_000_000])}
    b = {"get": _stats(1, 500, 0, 0, [9_000_000]), "head": _stats(1, 0, 0, 0, [100_000])}
    merged = merge_figures([a, None, b])
    get = merged["get"]
    assert (get["requests"], get["bytes"], get["retries"], get["throttled_503"]) == (3, 2500, 1, 1)
    assert get["total_latency"]["count"] == 3
    assert get["total_latency"]["min_ns"] == 1_000_000 and get["total_latency"]["max_ns"] == 9_000_000
    assert get["total_latency"]["mean_ns"] == (1_000_000 + 3_000_000 + 9_000_000) / 3
    assert get["first_byte_latency"]["max_ns"] == 4_500_000
    assert merged["head"]["requests"] == 1 and list(merged) == ["get", "head"]
    assert merge_figures([]) == {}


def test_noted_requests_are_exact_across_the_pending_batches():
    """OpStats.note holds latencies back and records them PENDING_REQUESTS at a time: whatever is read
    (to_dict, add, the histograms themselves) counts every request noted, as recording each one would."""
    rng = np.random.default_rng(3)
    n = OpStats.PENDING_REQUESTS * 2 + 5  # two full batches recorded on the way, five still pending
    first = rng.integers(0, 10**9, n)
    total = first + rng.integers(0, 10**9, n)
    noted, direct = OpStats(), OpStats()
    for i in range(n):
        noted.note(100, i % 2, int(first[i]), int(total[i]))
    direct.requests, direct.bytes, direct.retries = n, 100 * n, n // 2
    direct.first_byte.record(first)
    direct.total.record(total)
    assert noted.to_dict() == direct.to_dict()
    noted.note(7, 0, 1, 2)  # pending again: add() and the histogram read settle it too
    merged = OpStats()
    merged.add(noted)
    assert merged.requests == n + 1 and merged.total.count == n + 1 and merged.first_byte.min_ns == 1
