"""Plain-text tables of a report and of a comparison (what `iogen report`/`compare` print)."""
from __future__ import annotations

import math

from .requests import request_log_lines

__all__ = ["flag_lines", "fmt_bytes", "fmt_ns", "fmt_num", "measured_storage", "reads_lines", "render_report", "setup_line",
           "table"]


def fmt_ns(ns) -> str:
    """A duration in ns with a readable unit: 850 ns, 12.3 us, 4.56 ms, 1.234 s."""
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "n/a"
    ns = float(ns)
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} us"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.3f} s"


def fmt_num(x, digits: int = 1, signed: bool = False) -> str:
    """A number with thousands separators, or n/a."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return format(float(x), ("+" if signed else "") + f",.{digits}f")


def table(header, rows, align=None) -> str:
    """Columns padded to their widest cell; `align` is a string of l/r per column (default: l then r)."""
    cells = [list(map(str, header))] + [list(map(str, r)) for r in rows]
    ncol = len(header)
    align = align or ("l" + "r" * (ncol - 1))
    widths = [max(len(r[i]) for r in cells) for i in range(ncol)]

    def line(r):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align)).rstrip()

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def fmt_bytes(n) -> str:
    """A byte count in binary units: 512 B, 64.0 MiB, 1.50 GiB."""
    if n is None:
        return "n/a"
    n = float(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def au_loss_lines(loss: dict | None, label: str = "") -> list[str]:
    """Where lost AU went (iogen.metrics.summary_metrics.au_loss), and in plain words when the emulated
    compute, not the storage, is what lowered it."""
    if not loss or loss["lost_points"] <= 0:
        return []
    who = f"{label}: " if label else ""
    lines = [f"{who}AU lost {fmt_num(loss['lost_points'], 2)} points: {fmt_num(loss['sleep_overshoot_points'], 2)} to "
             f"the host's sleep overshooting the requested compute (mean {fmt_ns(loss['sleep_error_mean_ns'])} per "
             f"step of {fmt_ns(loss['requested_compute_mean_ns'])}; AU achieved "
             f"{fmt_num(100.0 - loss['other_points'], 2)}%), {fmt_num(loss['other_points'], 2)} to the data wait "
             f"(mean {fmt_ns(loss['wait_mean_ns'])} per step), barriers and the loop"]
    if loss["compute_lowered_au"]:
        lines.append(f"{who}the emulated compute, not the storage, lowered AU: most of the lost points are the "
                     "host's sleep taking longer than asked (a loaded or oversubscribed host), not waiting for data")
    return lines


def checkpoint_setup_line(s: dict) -> str:
    """What a checkpoint-only run measured, in one line (its `iogen.setup`, kind "checkpoint")."""
    per_rank = (fmt_bytes(s["rank_bytes_min"]) if s["rank_bytes_min"] == s["rank_bytes_max"]
                else f"{fmt_bytes(s['rank_bytes_min'])} .. {fmt_bytes(s['rank_bytes_max'])}")
    access = ", ".join(x for x in ("fsync" if s.get("fsync") else "no fsync",
                                   "O_DIRECT" if s.get("odirect") else "") if x)
    return (f"{s['workload']}: checkpoint-only, {s['model']}"
            + (f", {s['parallelism']}" if s.get("parallelism") else "")
            + (f", mode {s['mode']}" if s.get("mode") and s["mode"] != "default" else "")
            + f"; {s['num_ranks']} rank(s) on {len(s.get('hosts') or [])} host(s), {per_rank} per rank, "
            f"{fmt_bytes(s['checkpoint_bytes'])} per checkpoint; {s['num_checkpoints_write']} write(s), "
            f"{s['num_checkpoints_read']} read(s), {fmt_num(s['time_between_checkpoints_s'], 2)} s between; "
            f"{s['format']}, {access}, {s['write_threads']} write / {s['read_threads']} read thread(s), "
            f"{fmt_bytes(s['transfer_size_bytes'])} transfers; tiers: {s['tiers']}; core {s['core_implementation']}; "
            f"iogen {s['iogen_version']}")


def setup_line(setup: dict | None, checkpoint: bool = False) -> str:
    """What a run measured, in one line (summary.json `iogen.setup`); `checkpoint`: a checkpoint-only run."""
    if setup is not None and setup.get("kind") == "checkpoint":
        return checkpoint_setup_line(setup)
    if setup is None and checkpoint:
        return "setup: not recorded (checkpoint-only runs record it from summary schema_version 2 on)"
    if not setup:
        return "setup: not recorded (a run from an older iogen)"
    s = setup
    memory = s.get("node_memory_min_bytes")
    hosts = s.get("hosts") or []
    access = " O_DIRECT" if s.get("odirect") else ""
    evict = ", page cache evicted every epoch" if s.get("evict_page_cache") else ""
    return (f"{s['workload']}: {s['format']} read by the {s['data_loader']} loader{access}, "
            f"{s['read_threads']} read thread(s), batch {s['batch_size']}, record {fmt_bytes(s['record_length_bytes'])}"
            f"{' (stdev ' + fmt_bytes(s['record_length_bytes_stdev']) + ')' if s.get('record_length_bytes_stdev') else ''}, "
            f"dataset {fmt_bytes(s['dataset_bytes'])} ({s['num_files_train']} files)"
            f"{' vs node memory ' + fmt_bytes(memory) if memory else ''}{evict}; compute {s['computation_time']}; "
            f"{_ranks_words(s)} on {len(hosts)} host(s); core {s['core_implementation']}; iogen {s['iogen_version']}")


def _ranks_words(s: dict) -> str:
    """"N rank(s)", or where a process steps several emulated accelerators, how many and in what mode."""
    per = s.get("accelerators_per_process") or 1
    if per <= 1:
        return f"{s.get('num_ranks')} rank(s)"
    return (f"{s.get('num_accelerators')} accelerator(s), {per} per process (train.accelerators_per_process), "
            f"{s.get('num_ranks')} rank(s)")


def reads_lines(it: dict) -> list[str]:
    """Where the reads came from and the device bytes per epoch; a page-cache run says so loudly."""
    reads = it.get("reads_from") or {}
    device = it.get("device_read_bytes_per_epoch") or []
    shown = ", ".join(fmt_bytes(d) for d in device) if device else "n/a"
    source = reads.get("source", "unknown")
    lines = [f"reads from: {source.upper() if source != 'storage' else source} - "
             f"{reads.get('explanation', 'not recorded')}; device bytes per epoch: {shown}"]
    if it.get("page_cache_warning"):
        lines.append("WARNING: " + it["page_cache_warning"])
    store = it.get("object_store") or {}
    for ep in store.get("train_epochs", []):
        if (ep.get("get") or {}).get("requests"):
            lines.append(_requests_line(f"object store, epoch {ep['epoch']}", "GET", ep["get"]))
    for phase, what, op in (("staging", "staging", "get"), ("checkpoint_drain", "checkpoint drain", "put")):
        fig = (store.get(phase) or {}).get(op) or {}
        if fig.get("requests"):
            lines.append(_requests_line(f"object store, {what}", op.upper(), fig))
    if store.get("requests_by_endpoint"):  # storage.endpoint_urls: rank r's requests went to endpoint r mod N
        per = store.get("by_endpoint") or {}

        def troubles(url):  # the endpoint's retries, 503s and failed requests, where any
            d = per.get(url) or {}
            said = [f"{d[k]} {w}" for k, w in (("retries", "retries"), ("throttled_503", "throttled (503)"),
                                               ("errors", "failed")) if d.get(k)]
            return f" ({', '.join(said)})" if said else ""

        lines.append("object store, requests by endpoint: " + ", ".join(
            f"{url} {n}{troubles(url)}" for url, n in store["requests_by_endpoint"].items()))
    if (it.get("dataset_size_rule") or {}).get("met") is False:
        lines.append("NOTE: " + it["dataset_size_rule"]["message"])
    if (it.get("epoch_length_rule") or {}).get("met") is False:
        lines.append("NOTE: " + it["epoch_length_rule"]["message"])
    lines += ["NOTE: " + note for note in it.get("rules_notes") or []]
    if it.get("staging"):
        lines.append(staging_line(it["staging"]))
    if it.get("checkpoint_drain"):
        lines.append(drain_line(it["checkpoint_drain"]))
    return lines


def decode_line(dec: dict) -> str:
    """Decode mode's line: the host CPU time decoding took, apart from I/O (summary.json `iogen.decode`)."""
    per = dec.get("decode_cpu_ms_per_image")
    return (f"decode ({dec.get('decoder')}): {dec.get('images', 0):,} images, {dec.get('decode_cpu_s', 0.0):,.2f} s "
            f"host CPU ({'n/a' if per is None else format(per, '.3f')} ms per image), apart from I/O")


def _requests_line(label: str, op: str, fig: dict) -> str:
    """One line on an operation's requests: count, bytes, latency p50/p99, retries and 503s."""
    lat = fig.get("total_latency") or {}
    return (f"{label}: {fig['requests']} {op}s, {fmt_bytes(fig['bytes'])}, "
            f"latency p50 {lat['p50_ns'] / 1e6:.2f} ms, p99 {lat['p99_ns'] / 1e6:.2f} ms, "
            + (f"{fig['retries']} retries, {fig['throttled_503']} throttled (503)"
               if fig.get("retries") is not None else "retries and 503s not reported by the client"))


def drain_line(dr: dict) -> str:
    """One line on checkpoint drains: time blocked (and its parts) vs drain time, waits, and for
    training runs AU with and without a drain running."""
    cks = dr.get("checkpoints") or []

    def mean(key):
        vals = [c[key] for c in cks if c.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    waited = dr.get("waits_for_previous_drain", 0)
    rank_waits = dr.get("rank_waits_for_previous_drain")
    line = (f"checkpoint drain ({dr.get('mode')}): {len(cks)} checkpoint(s), "
            f"{fmt_bytes(dr.get('drain_bytes'))} to {dr.get('shared_folder')}; blocked "
            f"{fmt_num(dr.get('blocking_s_mean'), 3)} s (local write {fmt_num(mean('local_write_s'), 3)} s, "
            f"waiting for the previous drain {fmt_num(mean('waited_for_previous_drain_s'), 3)} s"
            f"{', the copy itself' if dr.get('mode') == 'sync' else ''}), "
            f"drain {fmt_num(dr.get('drain_s_mean'), 3)} s (means); ")
    if "steps_during_drain" in dr:  # training runs: the drain's effect on the steps
        during, without = dr.get("steps_during_drain") or {}, dr.get("steps_without_drain") or {}
        line += (f"AU {fmt_num(during.get('au_percentage'), 1)}% over {during.get('steps', 0)} step(s) during a "
                 f"drain, {fmt_num(without.get('au_percentage'), 1)}% over {without.get('steps', 0)} without; ")
    line += f"{waited} of {len(cks)} checkpoint(s) waited for a previous drain"
    if rank_waits is not None and rank_waits != waited:
        line += f" ({rank_waits} rank waits)"
    if dr.get("error"):
        line += f"; DRAIN FAILED: {dr['error']}"
    return line


def staging_line(st: dict) -> str:
    """One line on data staging: what was copied, how fast, and T_staging / T_epoch."""
    nodes = st.get("nodes") or []
    ratio = st.get("t_staging_over_t_epoch")
    spread = ""
    if len(nodes) > 1:
        spread = f", per node {fmt_num(st.get('t_staging_node_min_s'), 2)}-{fmt_num(st.get('t_staging_node_max_s'), 2)} s"
    reused = f", reused {st['reused_files']} staged file(s)" if st.get("reused_files") else ""
    rate = st.get("staging_gib_s")
    return (f"staged ({st.get('scope')} scope): {st.get('staged_files', 0)} file(s), {fmt_bytes(st.get('staged_bytes'))} "
            f"to {len(nodes)} node(s) in {fmt_num(st.get('t_staging_s'), 2)} s"
            f" ({'n/a' if rate is None else fmt_num(rate, 2)} GiB/s{spread}){reused}; "
            f"T_staging / T_epoch {'n/a' if ratio is None else fmt_num(ratio, 2)}")


def measured_lines(runs) -> list[str]:
    """What the runs measured: one line when they agree, else one per distinct setup with its runs."""
    groups: dict[str, list[str]] = {}
    for r in runs:
        groups.setdefault(setup_line(r.get("setup"), bool(r.get("checkpoint"))), []).append(r["label"])
    if len(groups) == 1:
        return ["measured: " + next(iter(groups))]
    return ["CONFIGURATIONS DIFFER: these runs did not measure the same thing"] + [
        f"  {', '.join(labels)}: {line}" for line, labels in groups.items()]


def page_cache_lines(runs) -> list[str]:
    """Loud lines naming the runs whose reads the page cache served (or may have: the run's own warning)."""
    cached = [r["label"] for r in runs if (r.get("reads_from") or {}).get("source") == "page cache"]
    partly = [r["label"] for r in runs if (r.get("reads_from") or {}).get("source") == "partly page cache"]
    maybe = [r for r in runs if r.get("page_cache_warning") and not (r.get("reads_from") or {}).get("source")]
    out = []
    if cached:
        out.append(f"WARNING: the page cache served the reads of {', '.join(cached)} (the device delivered under "
                   "10% of the bytes read): those figures measure memory, not storage")
    if partly:
        out.append(f"WARNING: the page cache served part of the reads of {', '.join(partly)}: those figures "
                   "overstate what storage delivers")
    out.extend(f"WARNING: {r['label']}: {r['page_cache_warning']}" for r in maybe)
    return out


def dataset_size_lines(runs) -> list[str]:
    """Runs whose dataset is below MLPerf Storage's size rule (iogen.config.sizing): one line per message, its runs first."""
    below: dict[str, list[str]] = {}
    for r in runs:
        if (r.get("dataset_size_rule") or {}).get("met") is False:
            below.setdefault(r["dataset_size_rule"]["message"], []).append(r["label"])
    return [f"{', '.join(labels)}: {message}" for message, labels in below.items()]


def cpu_line(cpu: dict | None) -> str | None:
    """One line of a run's CPU figures (summary.json iogen.cpu), or None when it has none."""
    if not cpu:
        return None
    return (f"CPU (user + system, every rank's process tree): {fmt_num(cpu.get('window_cpu_s_per_gib'), 3)} s per "
            f"GiB read, {fmt_num(cpu.get('window_cpu_s_per_1000_samples'), 3)} s per 1,000 samples over the "
            f"window; whole invocation {fmt_num(cpu.get('invocation_cpu_s'), 2)} s "
            f"({fmt_num(cpu.get('invocation_cpu_s_per_1000_samples'), 3)} s per 1,000 samples), start-up included")


def cpu_table(runs) -> list[str]:
    """The runs' CPU figures (iogen.metrics.cpu) as a table; nothing when no run has them."""
    if not any(r.get("cpu") for r in runs):
        return []
    rows = [[r["label"], *(fmt_num((r.get("cpu") or {}).get(k), d) for k, d in (
        ("window_cpu_s_per_gib", 3), ("window_cpu_s_per_1000_samples", 3), ("invocation_cpu_s", 2),
        ("invocation_cpu_s_per_1000_samples", 3)))] for r in runs]
    return ["", "CPU time (user + system s of every rank's process tree, loader workers included):",
            table(["run", "window s/GiB", "window s/1000 samples", "invocation s", "invocation s/1000 samples"],
                  rows, "lrrrr")]


def device_per_epoch(run) -> str:
    """Mean device bytes per epoch of a run (every rank), or n/a."""
    dev = [d for d in (run.get("device_read_bytes_per_epoch") or []) if d is not None]
    return fmt_bytes(sum(dev) / len(dev)) if dev else "n/a"


def reads_source(run) -> str:
    """storage, PAGE CACHE, PARTLY PAGE CACHE or unknown."""
    source = (run.get("reads_from") or {}).get("source") or "unknown"
    return source if source in ("storage", "unknown") else source.upper()


def measured_storage(it: dict) -> bool:
    """False when the page cache served (most or part of) the reads: the figures are not storage's."""
    return (it.get("reads_from") or {}).get("source") not in ("page cache", "partly page cache")


_METRIC_ROWS = (("au_percentage", "AU %", 2), ("throughput_samples_s", "samples/s", 1), ("io_mib_s", "MiB/s", 1))


def _gate(run) -> str:
    if not run["complete"]:
        return "INCOMPLETE"
    if not run.get("au_gate_applied", True):
        return "not applied"
    if run["au_met"] is None:
        return "n/a"
    return "met" if run["au_met"] else "NOT met"


def flag_lines(camp: dict) -> list[str]:
    """One entry per flagged run: "run-2 AU -14.0%, samples/s -20.6%"."""
    by_run: dict[str, list[str]] = {}
    for key, name, _ in _METRIC_ROWS:
        name = name.replace(" %", "")
        for f in camp["flagged"][key]:
            by_run.setdefault(f["label"], []).append(f"{name} {fmt_num(f['deviation_percentage'], 1, signed=True)}%")
    return [f"{label} {', '.join(parts)}" for label, parts in by_run.items()]


def checkpoint_lines(runs: list, camp: dict) -> list[str]:
    """Checkpoint-only runs: per run the mean write/read figures and the slowest/fastest rank, then the campaign."""
    ck_runs = [r for r in runs if r.get("checkpoint")]
    if not ck_runs or not camp.get("checkpoint"):
        return []
    from ..metrics.checkpoint import CHECKPOINT_METRICS

    rows = []
    for r in ck_runs:
        series = r.get("checkpoint_series") or {}
        spread = []
        for phase in ("write", "read"):
            p = series.get(phase)
            if p:
                spread.append(f"{phase} {fmt_num(min(p['rank_duration_min_seconds']), 3)}-"
                              f"{fmt_num(max(p['rank_duration_max_seconds']), 3)} s")
        rows.append([r["label"], *(fmt_num(r["checkpoint"].get(k), d) for k, _, d in CHECKPOINT_METRICS),
                     ", ".join(spread) or "n/a"])
    lines = ["", "checkpoints (per run: mean over its checkpoints of each checkpoint's rate; GiB = 2^30 bytes, "
                 "DLIO's and MLPerf's GB):"]
    lines.append(table(["run", *(name for _, name, _ in CHECKPOINT_METRICS), "rank durations (min-max)"], rows,
                       "lrrrrl"))
    srows = []
    for key, name, d in CHECKPOINT_METRICS:
        s = camp["checkpoint"]["metrics"][key]
        ci = "n/a" if s["ci95_low"] is None else f"[{fmt_num(s['ci95_low'], d)}, {fmt_num(s['ci95_high'], d)}]"
        srows.append([name, fmt_num(s["mean"], d), fmt_num(s["median"], d), fmt_num(s["min"], d),
                      fmt_num(s["max"], d), fmt_num(s["stdev_sample"], d), fmt_num(s["cv_percentage"], 2), ci])
    lines.append(table(["checkpoint metric", "mean", "median", "min", "max", "stdev", "CV %", "95% CI"], srows))
    return lines


def checkpoint_headline(camp: dict) -> str:
    """The campaign's checkpoint headline: write and read GiB/s and durations per checkpoint."""
    ch = camp["checkpoint"]["headline"]
    parts = []
    for phase, prefix in (("write", "save"), ("read", "load")):
        rate = ch.get(f"{prefix}_checkpoint_io_mean_GB_per_second")
        if rate is not None:
            parts.append(f"{phase} {fmt_num(rate, 3)} GiB/s "
                         f"({fmt_num(ch.get(f'{prefix}_checkpoint_duration_mean_seconds'), 3)} s)")
    return (f"  checkpoint {', '.join(parts) or 'n/a'} per checkpoint (GiB/s: the mean of each checkpoint's rate, "
            "DLIO's rule; GiB = 2^30 bytes, DLIO's GB)")


def _verdict(camp: dict, runs: list) -> str:
    checkpoint_only = bool(runs) and all(r.get("checkpoint") for r in runs)
    if camp["valid"] and camp.get("page_cache_runs"):
        return ("campaign VALID for the page cache, NOT a storage result: the page cache served the reads of "
                + ", ".join(camp["page_cache_runs"]))
    if camp["valid"] and checkpoint_only:
        return ("campaign VALID: every measured run is complete and alike (checkpoint-only runs have no AU gate: "
                "they run no training steps)")
    if camp["valid"] and any(not r.get("au_gate_applied", True) for r in runs if not r["warmup"]):
        return "campaign VALID: every measured run met its AU threshold or had no AU gate (no compute configured)"
    if camp["valid"]:
        return "campaign VALID: every measured run met its AU threshold"
    return "campaign NOT VALID: " + "; ".join(camp["invalid_reasons"])


def incomplete_lines(runs) -> list[str]:
    """One line per incomplete run, with the reason its summary gives."""
    return [f"INCOMPLETE: {r['label']}: {r.get('incomplete_reason') or 'no reason recorded'}"
            for r in runs if not r["complete"]]


def drain_lines(runs) -> list[str]:
    """Each run's checkpoint drain line (runs with checkpoint.local_folder)."""
    return [f"{r['label']}: {drain_line(r['checkpoint_drain'])}" for r in runs if r.get("checkpoint_drain")]


def render_checkpoint_report(report: dict) -> str:
    """The text report of checkpoint-only runs: the checkpoint figures lead; no training rows."""
    runs, camp = report["runs"], report["campaign"]
    warm = sum(1 for r in runs if r["warmup"])
    lines = [
        f"iogen report: {len(runs)} checkpoint-only run(s) ({warm} warm-up), workload "
        f"{', '.join(sorted({str(r['workload']) for r in runs}))}, "
        f"{', '.join(sorted({str(r['num_accelerators']) for r in runs}))} accelerator(s)",
        *measured_lines(runs),
        *class_lines(report),
        "",
        f"headline ({camp['reduction']}: {camp['rule']}):",
    ]
    lines.append(checkpoint_headline(camp) if camp.get("checkpoint") else "  no complete measured run")
    lines.append(_verdict(camp, runs))
    lines.extend(incomplete_lines(runs))
    lines.extend(checkpoint_lines(runs, camp))
    lines.extend(drain_lines(runs))
    lines.extend(cpu_table(runs))
    for note in camp["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def class_lines(report: dict) -> list[str]:
    """Runs of more than one comparability class (another workload's work per accelerator): which."""
    groups = report.get("classes") or {}
    if len(groups) <= 1:
        return []
    return ["note: the runs belong to {} comparability classes (the work of one accelerator differs; their "
            "statistics are not one result):".format(len(groups))] + [
        f"  class {key}: {', '.join(labels)}" for key, labels in groups.items()]


def render_report(report: dict) -> str:
    """The text form of a report document (report.json mirrors it)."""
    runs = report["runs"]
    camp = report["campaign"]
    if runs and all(r.get("checkpoint") for r in runs):
        return render_checkpoint_report(report)
    warm = sum(1 for r in runs if r["warmup"])
    workloads = sorted({str(r["workload"]) for r in runs})
    accels = sorted({str(r["num_accelerators"]) for r in runs})
    lines = [
        f"iogen report: {len(runs)} run(s) ({warm} warm-up), workload {', '.join(workloads)}, "
        f"{', '.join(accels)} accelerator(s)",
        *measured_lines(runs),
        *page_cache_lines(runs),
        "",
    ]
    rows = []
    for r in runs:
        wait = r.get("wait") or {}
        rows.append([
            r["label"], "warm-up" if r["warmup"] else "measured",
            fmt_num(r["au_percentage"], 2), fmt_num(r.get("au_achieved_percentage"), 2),
            fmt_ns(r.get("sleep_error_mean_ns")), fmt_num(r["throughput_samples_s"]), fmt_num(r["io_mib_s"]),
            fmt_ns(wait.get("p50_ns")), fmt_ns(wait.get("p99_ns")), fmt_ns(wait.get("max_ns")),
            device_per_epoch(r), reads_source(r), _gate(r),
        ])
    lines.append(table(["run", "kind", "AU %", "AU achieved %", "sleep error", "samples/s", "MiB/s", "wait p50",
                        "wait p99", "wait max", "device/epoch", "reads from", "AU gate"], rows, "llrrrrrrrrrll"))
    lines.extend(cpu_table(runs))
    for r in runs:
        if (r.get("au_loss") or {}).get("compute_lowered_au"):
            lines.extend(au_loss_lines(r["au_loss"], r["label"]))
    lines.extend(f"note: {line}" for line in dataset_size_lines(runs))
    lines.extend(class_lines(report))
    for r in runs:
        lines.extend(request_log_lines(r.get("request_log"), r["label"]))
    lines.append("")
    n = len(camp["measured_runs"])
    lines.append(f"campaign: {n} measured run(s)" + (f", {len(camp['warmup_runs'])} warm-up(s) excluded"
                                                       if camp["warmup_runs"] else ""))
    srows = []
    for key, name, d in _METRIC_ROWS:
        s = camp["metrics"][key]
        ci = "n/a" if s["ci95_low"] is None else f"[{fmt_num(s['ci95_low'], d)}, {fmt_num(s['ci95_high'], d)}]"
        srows.append([name, fmt_num(s["mean"], d), fmt_num(s["median"], d), fmt_num(s["min"], d),
                      fmt_num(s["max"], d), fmt_num(s["olympic_mean"], d), fmt_num(s["stdev_sample"], d),
                      fmt_num(s["cv_percentage"], 2), ci])
    lines.append(table(["metric", "mean", "median", "min", "max", "olympic", "stdev", "CV %", "95% CI"], srows))
    lines.append("stdev: sample (n - 1); 95% CI: Student-t interval of the mean")
    for note in sorted({note for k, _, _ in _METRIC_ROWS for note in camp["metrics"][k]["notes"]}):
        lines.append(f"note: {note}")
    wait = camp.get("wait")
    if wait:
        lines.append(
            f"batch wait over the measured runs ({wait['count']:,} steps): p50 {fmt_ns(wait['p50_ns'])}, "
            f"p90 {fmt_ns(wait['p90_ns'])}, p99 {fmt_ns(wait['p99_ns'])}, p99.9 {fmt_ns(wait['p99_9_ns'])}, "
            f"max {fmt_ns(wait['max_ns'])}"
        )
    flags = flag_lines(camp)
    if flags:
        lines.append(f"flagged, more than {camp['deviation_flag_percentage']:g}% from the mean:")
        lines.extend(f"  {f}" for f in flags)
    for note in camp["notes"]:
        lines.append(f"note: {note}")
    h = camp["headline"]
    lines.extend(checkpoint_lines(runs, camp))
    lines.extend(drain_lines(runs))
    lines.extend(incomplete_lines(runs))
    lines.append("")
    lines.append(f"headline ({camp['reduction']}: {camp['rule']}):")
    lines.append(f"  AU {fmt_num(h['au_percentage'], 2)}%, {fmt_num(h['throughput_samples_s'])} samples/s, "
                 f"{fmt_num(h['io_mib_s'])} MiB/s")
    if camp.get("checkpoint"):
        lines.append(checkpoint_headline(camp))
    lines.append(_verdict(camp, runs))
    return "\n".join(lines)
