"""Campaign statistics (docs/campaigns.md) on hand-computed inputs, including n = 1 and n = 2."""
import math

import pytest

from iogen.metrics.campaign import (
    REDUCTIONS,
    RunValues,
    campaign_stats,
    describe,
    reduce_values,
    run_values_from_summary,
)

# Student-t quantiles t(0.975, df) from the tables (not from iogen.metrics.tdist, which the code uses).
T975 = {1: 12.706204736174698, 4: 2.7764451051977987}


def approx(x):
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def test_five_runs_by_hand():
    s = describe([10, 12, 14, 16, 18])
    assert s.n == 5
    assert s.mean == approx(14.0)
    assert s.median == approx(14.0)
    assert (s.min, s.max) == (10.0, 18.0)
    assert s.olympic_mean == approx(14.0)  # (12 + 14 + 16) / 3
    assert s.stdev_sample == approx(math.sqrt(10.0))  # 40 / 4
    assert s.stdev_population == approx(math.sqrt(8.0))  # 40 / 5
    assert s.cv_percentage == approx(math.sqrt(10.0) / 14.0 * 100.0)
    half = T975[4] * math.sqrt(10.0) / math.sqrt(5.0)
    assert s.ci95_low == approx(14.0 - half)
    assert s.ci95_high == approx(14.0 + half)
    assert s.notes == ()


def test_olympic_drops_one_highest_and_one_lowest():
    s = describe([1, 2, 3, 4, 100])
    assert s.mean == approx(22.0)
    assert s.median == approx(3.0)
    assert s.olympic_mean == approx(3.0)  # (2 + 3 + 4) / 3
    # ties: only ONE of the equal extremes is dropped
    assert describe([5, 5, 5, 9]).olympic_mean == approx(5.0)
    assert describe([1, 1, 7]).olympic_mean == approx(1.0)


def test_two_runs_have_an_interval_but_no_olympic_mean():
    s = describe([10, 20])
    assert s.mean == approx(15.0)
    assert s.median == approx(15.0)
    assert s.olympic_mean is None
    assert any("olympic" in note and "n >= 3" in note for note in s.notes)
    assert s.stdev_sample == approx(math.sqrt(50.0))
    assert s.stdev_population == approx(5.0)
    half = T975[1] * math.sqrt(50.0) / math.sqrt(2.0)
    assert (s.ci95_low, s.ci95_high) == (approx(15.0 - half), approx(15.0 + half))


def test_one_run_says_what_is_undefined():
    s = describe([7.5])
    assert (s.n, s.mean, s.median, s.min, s.max) == (1, 7.5, 7.5, 7.5, 7.5)
    assert s.olympic_mean is None
    assert s.stdev_sample is None and s.cv_percentage is None
    assert s.ci95_low is None and s.ci95_high is None
    assert s.stdev_population == 0.0
    assert len(s.notes) == 2
    d = s.to_dict()
    assert d["olympic_mean"] is None and d["ci95_low"] is None and len(d["notes"]) == 2


def test_no_values_and_missing_values():
    assert describe([]).n == 0 and describe([]).mean is None
    s = describe([None, 4.0, float("nan"), 6.0])
    assert s.values == (4.0, 6.0) and s.mean == approx(5.0)


def test_identical_runs_have_a_zero_width_interval():
    s = describe([3.0, 3.0, 3.0])
    assert s.stdev_sample == 0.0 and s.ci95_low == s.ci95_high == 3.0 and s.cv_percentage == 0.0


def test_reductions_name_their_rule():
    s = describe([1, 2, 3, 4, 100])
    got = {r: reduce_values(s, r) for r in REDUCTIONS}
    assert got["mean"][0] == approx(22.0) and "MLPerf Storage" in got["mean"][1]
    assert got["olympic"][0] == approx(3.0) and "olympic" in got["olympic"][1]
    assert got["median"][0] == approx(3.0)
    assert got["min"][0] == approx(1.0)
    assert reduce_values(describe([1, 2]), "olympic")[0] is None
    with pytest.raises(ValueError):
        reduce_values(s, "max")


def run(label, au, tp, io, *, warmup=False, met=True, complete=True, workload="w", ranks=1):
    return RunValues(label, f"/x/{label}", warmup, complete, au, tp, io, met, 90.0, workload, ranks)


def test_campaign_excludes_warmups_and_flags_outliers():
    runs = [
        run("warmup-1", 50.0, 1.0, 1.0, warmup=True, met=False),  # slow and failing: ignored
        run("run-1", 95.0, 100.0, 10.0),
        run("run-2", 95.0, 100.0, 10.0),
        run("run-3", 95.0, 100.0, 10.0),
        run("run-4", 95.0, 100.0, 10.0),
        run("run-5", 95.0, 120.0, 10.0),
    ]
    c = campaign_stats(runs)
    assert c.valid and c.reasons == ()
    assert c.warmups == ("warmup-1",)
    assert c.measured == ("run-1", "run-2", "run-3", "run-4", "run-5")
    assert c.headline["throughput_samples_s"] == approx(104.0)
    assert c.headline["au_percentage"] == approx(95.0)
    assert "arithmetic mean" in c.rule
    # 120 is 15.4% above the mean of 104; 100 is 3.8% below: only run-5 is flagged
    flagged = c.flagged["throughput_samples_s"]
    assert [f["label"] for f in flagged] == ["run-5"]
    assert flagged[0]["deviation_percentage"] == approx((120.0 - 104.0) / 104.0 * 100.0)
    assert c.flagged["au_percentage"] == []
    olympic = campaign_stats(runs, "olympic")
    assert olympic.headline["throughput_samples_s"] == approx(100.0)
    assert "olympic" in olympic.rule
    d = c.to_dict()
    assert d["headline"]["throughput_samples_s"] == approx(104.0)
    assert d["valid"] is True and d["warmup_runs"] == ["warmup-1"]


def test_campaign_is_invalid_when_a_measured_run_misses_the_au_threshold():
    c = campaign_stats([run("run-1", 95.0, 1.0, 1.0), run("run-2", 80.0, 1.0, 1.0, met=False)])
    assert not c.valid
    assert any("run-2" in r and "AU threshold" in r for r in c.reasons)


def test_campaign_with_one_and_two_runs_does_not_crash():
    one = campaign_stats([run("run-1", 95.0, 100.0, 10.0)])
    assert one.valid and one.headline["throughput_samples_s"] == 100.0
    assert one.metrics["throughput_samples_s"].ci95_low is None
    two = campaign_stats([run("run-1", 95.0, 100.0, 10.0), run("run-2", 95.0, 110.0, 10.0)], "olympic")
    assert two.headline["throughput_samples_s"] is None
    assert any("undefined" in n for n in two.notes)


def test_incomplete_and_mixed_runs_make_the_campaign_invalid():
    c = campaign_stats([run("run-1", 95.0, 100.0, 10.0), run("run-2", 95.0, 50.0, 5.0, complete=False)])
    assert not c.valid and c.metrics["throughput_samples_s"].n == 1
    mixed = campaign_stats([run("run-1", 95.0, 1.0, 1.0), run("run-2", 95.0, 1.0, 1.0, workload="other")])
    assert not mixed.valid and any("different workloads" in r for r in mixed.reasons)
    only_warmups = campaign_stats([run("warmup-1", 95.0, 1.0, 1.0, warmup=True)])
    assert not only_warmups.valid


def test_run_values_from_a_summary_document():
    doc = {
        "workload": "default",
        "num_accelerators": 2,
        "metric": {"train_au_mean_percentage": 91.0, "train_au_meet_expectation": "success",
                   "train_throughput_mean_samples_per_second": 12.0},
        "iogen": {"label": "warmup-1", "warmup": True, "complete": True,
                  "metrics": {"au_threshold_percentage": 90.0,
                              "train": {"au_mean_percentage": 91.0, "throughput_mean_samples_s": 12.0,
                                        "io_mean_mib_s": 3.5}}},
    }
    r = run_values_from_summary(doc, "/runs/a")
    assert (r.label, r.warmup, r.complete, r.au_met) == ("warmup-1", True, True, True)
    assert (r.au_percentage, r.throughput_samples_s, r.io_mib_s) == (91.0, 12.0, 3.5)
    assert r.au_threshold_percentage == 90.0 and r.num_accelerators == 2


def test_pure_io_runs_keep_a_campaign_valid():
    # train.computation_time = 0: AU ~0 "fails" DLIO's comparison, but no AU gate applies
    summary = {"metric": {"train_au_meet_expectation": "fail", "train_au_mean_percentage": 0.0},
               "iogen": {"label": "run-1", "complete": True,
                         "metrics": {"au_gate": {"applied": False, "met": None, "reason": "no compute"},
                                     "train": {"au_mean_percentage": 0.0, "throughput_mean_samples_s": 10.0,
                                               "io_mean_mib_s": 1.0}}}}
    rv = run_values_from_summary(summary, "/x/run-1")
    assert rv.au_gate_applied is False and rv.au_met is False
    c = campaign_stats([rv, run_values_from_summary(summary, "/x/run-2")])
    assert c.valid, c.reasons
