"""Node-local storage in front of a bucket (a real S3 server, moto's): checkpoints written to
checkpoint.local_folder and drained to the bucket, and data staged from the bucket to staging.folder."""
import os

import pytest

from .test_datagen_verify import s3_overrides
from .test_run import summary_of


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_training_checkpoints_drain_to_the_direct_upload_keys(s3, tmp_path, iogen_cmd, mode):
    """Rank 0 writes each checkpoint locally and drains it to the key a direct upload uses; both
    tiers keep only the newest; the drain's requests are counted apart."""
    size = 12_000_000  # two parts of 8 MiB (the smallest multiple of transfer_size 4 MiB of at least 5 MiB)
    over = s3_overrides(s3, tmp_path, "npz", **{"train.computation_time": 0, "train.epochs": 2,
                                                "workflow.checkpoint": True, "model.model_size_bytes": size,
                                                "checkpoint.checkpoint_folder": "ck", "checkpoint.drain": mode,
                                                "checkpoint.local_folder": str(tmp_path / "local")})
    r = iogen_cmd("run", "default", *over, "--generate")
    assert r.returncode == 0, r.stderr
    doc = summary_of(r)
    assert os.listdir(tmp_path / "local") == ["default-epoch2-step0.ckpt"]
    listed = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix="pre/ck/")["Contents"]
    assert [(o["Key"], o["Size"]) for o in listed] == [("pre/ck/default-epoch2-step0.ckpt", size)]
    body = s3.client.get_object(Bucket=s3.bucket, Key="pre/ck/default-epoch2-step0.ckpt")["Body"].read()
    with open(tmp_path / "local" / "default-epoch2-step0.ckpt", "rb") as f:
        assert body == f.read()
    dr = doc["iogen"]["checkpoint_drain"]
    assert dr["mode"] == mode and dr["error"] is None and dr["shared_folder"] == f"s3://{s3.bucket}/pre/ck"
    assert len(dr["checkpoints"]) == 2 and dr["drain_bytes"] == 2 * size
    for ev in dr["checkpoints"]:
        assert ev["drain_bytes"] == size and ev["drain_s"] > 0 and ev["local_write_s"] > 0
    block = doc["iogen"]["object_store"]
    assert "checkpoint" not in block  # nothing uploaded inside the step loop's checkpoint window
    drained = block["checkpoint_drain"]
    assert drained["put"]["requests"] == 2 * 2 and drained["put"]["bytes"] == 2 * size
    assert drained["delete"]["requests"] == 1  # the superseded checkpoint's object
    assert f"checkpoint drain ({mode})" in r.stdout
