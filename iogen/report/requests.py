"""The request log of a run folder (`output.request_log: true`, iogen/storage/requestlog.py), summarised.

    summary = request_log_entry(run_dir, interval_s)   # None without a log; report.json's `request_log`
    lines = request_log_lines(summary, label)            # the text report's lines
    write_requests_csv(run_dir, stream)                  # every request, one CSV row each (`iogen report --requests`)

A torn or corrupt log file is a DataError naming the file and the byte offset (exit 2).
"""
from __future__ import annotations

import glob
import os

import numpy as np

from ..storage.requestlog import FLAG_ERROR, FLAG_NO_STATUS, OPS, read_request_log

PCTS = (("p50_ns", 50), ("p90_ns", 90), ("p99_ns", 99))
MAX_SERIES_POINTS = 2000  # the time series is coarsened to at most this many intervals


def request_log_files(run_dir: str) -> list[str]:
    """The run folder's request logs (rank-R.reqs and its DataLoader workers' rank-R-pid-P.reqs)."""
    return sorted(glob.glob(os.path.join(glob.escape(run_dir), "requests", "*.reqs")))


def read_run_requests(run_dir: str):
    """(rows, keys, endpoints) of every log of the run: rows concatenated, keys and endpoints as arrays of str
    aligned with the rows. None without a log."""
    files = request_log_files(run_dir)
    if not files:
        return None
    rows, keys, endpoints = [], [], []
    for path in files:
        _, strings, r = read_request_log(path)
        table = np.array(strings, dtype=object)
        rows.append(r)
        keys.append(table[r["key"]] if len(r) else np.zeros(0, object))
        endpoints.append(table[r["endpoint"]] if len(r) else np.zeros(0, object))
    return np.concatenate(rows), np.concatenate(keys), np.concatenate(endpoints)


def _latency(lat: np.ndarray) -> dict:
    lat = lat[lat >= 0]
    if not len(lat):
        return {"count": 0, **{k: None for k, _ in PCTS}, "max_ns": None}
    return {"count": int(len(lat)), **{k: int(np.percentile(lat, q)) for k, q in PCTS}, "max_ns": int(lat.max())}


def _group(rows: np.ndarray) -> dict:
    err = (rows["flags"] & FLAG_ERROR) != 0
    ok = rows[~err]
    return {"requests": int(len(ok)), "errors": int(err.sum()), "bytes": int(ok["bytes"].sum()),
            "latency": _latency(ok["latency_ns"]), "first_byte": _latency(ok["first_byte_ns"])}


def request_log_entry(run_dir: str, interval_s: float | None = None) -> dict | None:
    """report.json's `request_log` of a run: requests, errors, bytes and latency percentiles per operation, per
    endpoint and per time interval (interval_s, default 1 s); None when the run has no request log."""
    found = read_run_requests(run_dir)
    if found is None:
        return None
    rows, _, endpoints = found
    out = {"files": len(request_log_files(run_dir)), **_group(rows),
           "status_not_reported": int(((rows["flags"] & FLAG_NO_STATUS) != 0).sum()),
           "by_op": {}, "by_endpoint": {}, "over_time": None}
    for code, op in enumerate(OPS):
        sel = rows["op"] == code
        if sel.any():
            out["by_op"][op] = _group(rows[sel])
    for ep in sorted(set(endpoints.tolist())):
        out["by_endpoint"][ep or "(the AWS default endpoint)"] = _group(rows[endpoints == ep])
    if len(rows):
        interval_ns = int((interval_s or 1.0) * 1e9)
        t0 = int(rows["t_start_ns"].min())
        span = int(rows["t_start_ns"].max()) - t0
        while span // interval_ns + 1 > MAX_SERIES_POINTS:
            interval_ns *= 2
        slot = (rows["t_start_ns"] - t0) // interval_ns
        series = {"interval_s": interval_ns / 1e9, "t_s": [], "requests": [], "errors": [], "bytes": [],
                  "p50_ns": [], "p99_ns": [], "max_ns": []}
        order = np.argsort(slot, kind="stable")  # one pass over the rows, grouped by interval
        slots, starts = np.unique(slot[order], return_index=True)
        for s, part in zip(slots.tolist(), np.split(rows[order], starts[1:])):
            g = _group(part)
            series["t_s"].append(round(float(s) * interval_ns / 1e9, 6))
            for k in ("requests", "errors", "bytes"):
                series[k].append(g[k])
            for k in ("p50_ns", "p99_ns", "max_ns"):
                series[k].append(g["latency"][k])
        out["over_time"] = series
    return out


def _ms(ns) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f} ms"


def request_log_lines(summary: dict | None, label: str = "") -> list[str]:
    """The text report's lines for one run's request log (nothing without one)."""
    if not summary:
        return []
    who = f" of {label}" if label else ""
    lat = summary["latency"]
    lines = [f"request log{who}: {summary['requests']:,} request(s), {summary['errors']:,} failed, "
             f"{summary['bytes']:,} bytes, latency p50 {_ms(lat['p50_ns'])}, p99 {_ms(lat['p99_ns'])}, "
             f"max {_ms(lat['max_ns'])} ({summary['files']} file(s) in requests/)"]
    for title, groups in (("operation", summary["by_op"]), ("endpoint", summary["by_endpoint"])):
        for name, g in groups.items():
            lines.append(f"  {title} {name}: {g['requests']:,} request(s), {g['errors']:,} failed, "
                         f"{g['bytes']:,} bytes, p50 {_ms(g['latency']['p50_ns'])}, p90 {_ms(g['latency']['p90_ns'])}, "
                         f"p99 {_ms(g['latency']['p99_ns'])}, first byte p50 {_ms(g['first_byte']['p50_ns'])}")
    ts = summary.get("over_time")
    if ts:
        lines.append(f"  over time ({ts['interval_s']:g} s intervals from the first request): "
                     + ", ".join(f"{t:g}s {n} req p50 {_ms(p)} p99 {_ms(q)}" for t, n, p, q in
                                 list(zip(ts["t_s"], ts["requests"], ts["p50_ns"], ts["p99_ns"]))[:20])
                     + (f", ... ({len(ts['t_s'])} intervals)" if len(ts["t_s"]) > 20 else ""))
    return lines


CSV_FIELDS = ("t_start_ns", "rank", "op", "key", "offset", "length", "bytes", "status", "error", "latency_ns",
              "first_byte_ns", "retries", "endpoint")


def write_requests_csv(run_dir: str, stream) -> int:
    """Every request of the run's logs as CSV (by start time); returns the rows written. A run without a request
    log is a DataError naming the folder."""
    import csv

    from ..errors import DataError

    found = read_run_requests(run_dir)
    if found is None:
        raise DataError(run_dir, "has no request log (requests/*.reqs): run with output.request_log=true")
    rows, keys, endpoints = found
    order = np.argsort(rows["t_start_ns"], kind="stable")
    w = csv.writer(stream, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for i in order.tolist():
        r = rows[i]
        w.writerow([int(r["t_start_ns"]), int(r["rank"]), OPS[int(r["op"])], keys[i], int(r["offset"]),
                    int(r["length"]), int(r["bytes"]), int(r["status"]) if not r["flags"] & FLAG_NO_STATUS else "",
                    int(bool(r["flags"] & FLAG_ERROR)), int(r["latency_ns"]), int(r["first_byte_ns"]),
                    int(r["retries"]), endpoints[i]])
    return len(order)
