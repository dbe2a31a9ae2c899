"""train.accelerators_per_process: what a process-wide step would change is refused, exit 2 naming the keys."""
import os

from ..conftest import run_iogen


def test_refused_where_it_would_not_mean_what_it_says(tmp_path, tiny):
    for extra, key in ((["reader.data_loader=pytorch"], "reader.data_loader"),
                       (["reader.prefetch_size=0"], "reader.prefetch_size"),
                       (["train.allreduce_bytes=64"], "train.allreduce_bytes")):
        res = run_iogen("validate", "default", *tiny(), "train.accelerators_per_process=2", *extra)
        assert res.returncode == 2 and key in res.stderr and "train.accelerators_per_process" in res.stderr, res.stderr
    res = run_iogen("validate", "default", *tiny(), "train.accelerators=3")
    assert res.returncode == 2 and "train.accelerators = 3 applies with train.accelerators_per_process > 1" in res.stderr
    # 5 accelerators at 2 a process need 3 processes, not 1
    res = run_iogen("run", "default", "--generate", *tiny(), "train.accelerators_per_process=2", "train.accelerators=5")
    assert res.returncode == 2 and "needs 3 process(es), but the launcher started 1" in res.stderr, res.stderr
    assert not os.path.exists(tmp_path / "results")
