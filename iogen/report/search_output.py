"""What `iogen search` writes: search.json, search.txt (the table and the result), search.png and
search.html (the result, the plot and the table on one self-contained page).

The text table mirrors the JSON: one row per accelerator count probed, its probes pooled (AU mean
and 95% interval over the measured runs, samples/s and MiB/s means, pass/fail, near the
threshold or not). The plot shows AU (with its interval and the threshold) and samples/s against
accelerators; matplotlib is imported only here, only when the plot is asked for.
"""
from __future__ import annotations

import os

from .rundir import write_atomic, write_json


def not_monotone(points: dict) -> list[tuple[int, int]]:
    """(k1, k2) of successive counts probed where AU rose with more accelerators (k1 < k2)."""
    ks = [k for k in sorted(points) if points[k].au.mean is not None]
    return [(a, b) for a, b in zip(ks, ks[1:]) if points[b].au.mean > points[a].au.mean]


def caveats(points: dict) -> list[str]:
    """The probes' caveats, one line each, with the counts they apply to."""
    by_kind: dict = {}
    for k in sorted(points):
        for p in points[k].probes:
            for kind, text in getattr(p, "caveats", []):
                entry = by_kind.setdefault(kind, [[], text])
                if k not in entry[0]:
                    entry[0].append(k)
    out = []
    for kind, (ks, text) in by_kind.items():
        at = ", ".join(map(str, ks))
        if kind == "page cache":
            out.append(f"PAGE CACHE at n = {at}: {text}. The AU measures memory, not storage: N says nothing about "
                       "the storage; use a dataset larger than memory, reader.odirect=True or "
                       "reader.evict_page_cache=True")
        elif kind == "short epochs":
            out.append(f"SHORT EPOCHS at n = {at}: {text}")
        else:
            out.append(f"DATASET SIZE at n = {at}: {text}")
    return out


def _num(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def point_dict(point, search_dir: str) -> dict:
    """JSON form of one accelerator count."""
    return {
        "accelerators": point.accelerators,
        "runs": point.runs,
        "au_mean_percentage": point.au.mean,
        "au_ci95_low_percentage": None if point.au.ci95_low is None else max(0.0, point.au.ci95_low),
        "au_ci95_high_percentage": None if point.au.ci95_high is None else min(100.0, point.au.ci95_high),
        "au_values_percentage": list(point.au.values),
        "throughput_mean_samples_s": point.throughput_samples_s,
        "io_mean_mib_s": point.io_mib_s,
        "passed": point.passed,
        "near_threshold": point.near,
        "epochs_straddle_threshold": point.straddles,
        "measured_steps_per_rank": point.measured_steps,
        "probes": [{"index": p.index, "folder": os.path.relpath(p.folder, search_dir), "returncode": p.returncode,
                    "duration_s": p.duration_s,
                    "run_dirs": [os.path.relpath(r.path, search_dir) for r in p.runs]} for p in point.probes],
    }


def result_line(name: str, n: int, points: dict, threshold_pct: float, max_accelerators: int,
                min_steps: int = 0, per_process: int = 1) -> str:
    """The final line: N and the evidence (AU at N and at the first failing count), noise stated,
    then the notes on that evidence (AU not monotone in n, too few measured steps). `per_process`:
    train.accelerators_per_process, said where a process stepped several accelerators."""
    def at(k):
        pt = points[k]
        ci = ("" if pt.au.ci95_low is None else
              f" [{max(0.0, pt.au.ci95_low):.1f}, {min(100.0, pt.au.ci95_high):.1f}]")
        near = ", near the threshold" if pt.near else ""
        return f"AU {pt.au.mean:.2f}%{ci} at {k} ({pt.runs} run(s){near})"

    failed = sorted(k for k, p in points.items() if not p.passed and k > n)
    if n == 0:
        text = (f"N = 0: not even 1 accelerator keeps AU >= {threshold_pct:g}% on {name}: {at(failed[0])}")
    elif not failed:
        text = (f"N >= {n}: {n} accelerator(s) (--max) keep AU >= {threshold_pct:g}% on {name}, the limit was not "
                f"reached: {at(n)}")
    else:
        text = (f"N = {n}: {n} accelerator(s) keep AU >= {threshold_pct:g}% on {name}: {at(n)}; "
                f"{at(failed[0])} is below")
    if per_process > 1:
        text = text.replace(" accelerator(s) ", f" accelerator(s) ({per_process} per process) ", 1)
    near = [k for k in ([n] if n else []) + failed[:1] if points[k].near]
    if near:
        text += (f". Within the noise band at {', '.join(map(str, near))}: each was probed again and decided on "
                 "the pooled runs; a rerun may move N by one")
    straddle = [k for k in near if points[k].straddles]
    if straddle:
        text += f" (at {', '.join(map(str, straddle))} the epochs' AU lay on both sides of the threshold)"
    rises = [f"{points[b].au.mean:.2f}% at {b} above {points[a].au.mean:.2f}% at {a}"
             for a, b in not_monotone(points)]
    if rises:
        text += (". AU is not monotone in n (" + "; ".join(rises) + "): the bisection assumes AU falls as "
                 "accelerators are added, so N is where this search crossed the threshold, not necessarily the "
                 "only crossing")
    unsteady = {k: text for k in ([n] if n else []) + failed[:1] for p in points[k].probes
                for kind, text in getattr(p, "caveats", []) if kind == "short epochs"}
    if unsteady:
        first = min(unsteady)
        text += (f". CAVEAT: epochs too short for a steady state at n = {', '.join(map(str, sorted(unsteady)))}, so "
                 f"N is not the storage's figure (it depends on how the dataset is cut into epochs): "
                 f"{unsteady[first].split(': ', 1)[-1]}")
    short = [k for k in sorted(points) if min_steps and points[k].measured_steps < min_steps]
    if short:
        text += (f". Fewer than {min_steps} measured steps per rank at {', '.join(map(str, short))}: "
                 "weak evidence")
    return text


def render_table(points: dict, threshold_pct: float) -> str:
    """The probes' table, one row per accelerator count, in order."""
    header = ["accelerators", "runs", "steps", "AU %", "AU 95% CI", "samples/s", "MiB/s", "result", "probes"]
    rows = []
    for k in sorted(points):
        p = points[k]
        ci = ("n/a" if p.au.ci95_low is None else
              f"[{max(0.0, p.au.ci95_low):.2f}, {min(100.0, p.au.ci95_high):.2f}]")
        rows.append([str(k), str(p.runs), str(p.measured_steps), _num(p.au.mean, ".2f"), ci, _num(p.throughput_samples_s, ",.1f"),
                     _num(p.io_mib_s, ",.1f"), ("pass" if p.passed else "FAIL") + (" (near)" if p.near else ""),
                     ", ".join(os.path.basename(pr.folder) for pr in p.probes)])
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    right = {1, 2, 3, 5, 6}

    def line(r):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows),
                      f"pass: mean AU of the count's measured runs >= {threshold_pct:g}%; steps: measured steps per "
                      "rank (metrics window, every epoch and run); (near): within the noise band or epochs on both "
                      "sides of the threshold, probed again"])


def write_plot(path: str, points: dict, threshold_pct: float, title: str, n: int | None = None,
               notes: list | None = None) -> None:
    """AU (with its 95% interval where one exists, and the threshold), samples/s against accelerators,
    N marked, and the caveats below, as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(points)
    au = [points[k].au.mean for k in ks]
    lo = [a - max(0.0, points[k].au.ci95_low) if points[k].au.ci95_low is not None else 0.0 for a, k in zip(au, ks)]
    hi = [min(100.0, points[k].au.ci95_high) - a if points[k].au.ci95_high is not None else 0.0
          for a, k in zip(au, ks)]
    has_ci = any(points[k].au.ci95_low is not None for k in ks)
    import textwrap

    wrapped = "\n".join(textwrap.fill(note, 110) for note in notes or [])
    note_lines = wrapped.count("\n") + 1 if wrapped else 0
    height = 4 + 0.1 * note_lines
    fig, ax = plt.subplots(figsize=(7, height))
    if has_ci:
        ax.errorbar(ks, au, yerr=[lo, hi], marker="o", color="tab:blue", capsize=3, label="AU % (mean, 95% CI)")
    else:  # a single run per count: no interval to draw, and the legend does not claim one
        ax.plot(ks, au, marker="o", color="tab:blue", label="AU % (one run per count, no interval)")
    ax.axhline(threshold_pct, color="tab:red", linestyle="--", label=f"threshold {threshold_pct:g}%")
    for k in ks:
        if not points[k].passed:
            ax.plot([k], [points[k].au.mean], marker="x", color="tab:red", markersize=10)
    if n:
        ax.axvline(n, color="black", linestyle=":", label=f"N = {n}")
    ax.set_xlabel("emulated accelerators")
    ax.set_ylabel("AU %", color="tab:blue")
    ax.set_ylim(0, 105)
    ax.set_xticks(ks)
    ax2 = ax.twinx()
    ax2.plot(ks, [points[k].throughput_samples_s or 0.0 for k in ks], marker="s", color="tab:green",
             label="samples/s")
    ax2.set_ylabel("samples/s (all accelerators)", color="tab:green")
    ax2.set_ylim(bottom=0)
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="lower left", fontsize=8)
    ax.set_title(title, fontsize=10)
    if wrapped:  # the caveats under the plot: the PNG alone must not read as a storage result
        fig.text(0.01, 0.01, wrapped, fontsize=6.5, color="darkred", va="bottom", ha="left")
        fig.tight_layout(rect=(0, (0.1 * note_lines + 0.05) / height, 1, 1))
    else:
        fig.tight_layout()
    from ..common.atomic import claim

    tmp = f"{path}.tmp.{os.getpid()}.png"
    claim(tmp, "the plot")  # matplotlib opens it by name: the regular file made here, never a link
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)


def write_outputs(search_dir: str, doc: dict, points: dict, threshold_pct: float, result: str | None,
                  plot: bool) -> list[str]:
    """search.json, search.txt and (when asked and there is something to plot) search.png."""
    notes = caveats(points)
    doc = dict(doc, points=[point_dict(points[k], search_dir) for k in sorted(points)], result=result,
               caveats=notes, au_not_monotone=[list(pair) for pair in not_monotone(points)])
    written = [os.path.join(search_dir, "search.json"), os.path.join(search_dir, "search.txt")]
    write_json(written[0], doc)
    text = render_table(points, threshold_pct) if points else "no accelerator count was measured"
    text += "".join(f"\nCAVEAT: {note}" for note in notes)
    write_atomic(written[1], text + "\n" + (result or "search incomplete: " + str(doc.get("incomplete_reason")))
                 + "\n")
    if plot and points:
        written.append(os.path.join(search_dir, "search.png"))
        write_plot(written[-1], points, threshold_pct, f"iogen search: {doc['workload']}",
                   doc.get("accelerators"), notes)
        written.append(os.path.join(search_dir, "search.html"))
        write_atomic(written[-1], render_html(doc, text + "\n" + (result or ""), written[-2]))
    return written


def render_html(doc: dict, text: str, png_path: str) -> str:
    """search.html: the result, the plot (inline) and the table, one self-contained page."""
    import base64
    import html

    with open(png_path, "rb") as fh:
        png = base64.b64encode(fh.read()).decode("ascii")
    title = html.escape(f"iogen search: {doc['workload']}")
    return (f"<!doctype html>\n<html><head><meta charset='utf-8'><title>{title}</title>"
            "<style>body{font-family:sans-serif;margin:2em;max-width:60em} pre{background:#f6f6f6;padding:1em;"
            "overflow-x:auto}</style></head><body>"
            f"<h1>{title}</h1><p><b>{html.escape(doc.get('result') or 'search incomplete')}</b></p>"
            + "".join(f"<p style='color:#a00'><b>CAVEAT:</b> {html.escape(note)}</p>" for note in doc.get("caveats", []))
            + f"<p>launcher <code>{html.escape(doc['launcher'])}</code>, threshold {doc['au_threshold_percentage']:g}%, "
            f"{doc['runs_per_probe']} run(s) per probe, at least {doc.get('min_measured_steps', 0)} measured steps "
            f"per rank per probe, noise band {doc['noise_pp']:g} pp. "
            f"Rule: {html.escape(doc['rule'])}.</p>"
            f"<img alt='AU and samples/s against accelerators' src='data:image/png;base64,{png}'>"
            f"<pre>{html.escape(text)}</pre></body></html>\n")
