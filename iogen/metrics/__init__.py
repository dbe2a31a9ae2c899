"""Every number iogen reports, defined once: step rows -> epoch -> ranks -> run (numpy only).

Definitions are written out for users in docs/metrics.md (and docs/campaigns.md for campaigns).
Where a formula reproduces DLIO (argonne-lcf/dlio_benchmark, `utils/statscounter.py`) the
docstring says so; where iogen deliberately differs (DLIO 2.0.0 computes throughput over a
window that includes step 1 and AU over one that does not, labels MiB as MB, reports a nominal rather than a measured bandwidth) iogen's honest
figure is reported beside DLIO's.

The stages, one module each:
  epoch    epoch_metrics(rows)         one rank, one epoch, one phase -> EpochMetrics
           rank_epochs_array(rows)     one rank, every epoch -> float64 [epochs, EPOCH_FIELDS]
                                       (the buffer ranks exchange with MPI Gather)
  run      combine_ranks(per_rank)     [ranks, epochs, fields] -> CombinedEpochs (per epoch)
           run_metrics(train, eval)    -> RunMetrics (one invocation)
  ranks    reduce_ranks(world, ...)    every rank's rows -> the gathered [ranks, epochs, fields]
                                       arrays, device bytes and wait histograms summed over ranks
  summary  dlio_metric_block(run), iogen_metric_block(run) -> the dicts summary.json carries

  campaign campaign_stats(runs)       the measured runs of a campaign -> statistics and a
                                       headline with its rule (across invocations, docs/campaigns.md)
  latency  wait_histograms(logs)        batch-wait histograms over the same window as AU,
                                       merged exactly across ranks and runs (iogen.common.histogram)
"""
from .epoch import EPOCH_FIELDS, FIELD, MIB, EpochMetrics, epoch_metrics, rank_epochs_array, stack_ranks
from .run import CombinedEpochs, PhaseMetrics, RunMetrics, combine_ranks, run_metrics
from .summary_metrics import dlio_metric_block, iogen_metric_block

__all__ = [
    "EPOCH_FIELDS",
    "FIELD",
    "MIB",
    "CombinedEpochs",
    "EpochMetrics",
    "PhaseMetrics",
    "RunMetrics",
    "combine_ranks",
    "dlio_metric_block",
    "epoch_metrics",
    "iogen_metric_block",
    "rank_epochs_array",
    "run_metrics",
    "stack_ranks",
]
