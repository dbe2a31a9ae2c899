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
