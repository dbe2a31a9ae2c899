"""MLPerf Storage v3.0's CLOSED training and checkpointing files as shipped: they validate, and run
scaled down with DLIO's `++workload.` overrides (the way mlpstorage passes them)."""
import os

import pytest

from iogen.config import load_workload

from ..conftest import load_summary, run_iogen

V3 = ["mlperf_v3_retinanet_b200", "mlperf_v3_retinanet_mi355", "mlperf_v3_unet3d_b200", "mlperf_v3_llama3_8b"]


@pytest.mark.parametrize("stem", V3)
def test_the_v3_files_validate_as_shipped(dlio_yaml, stem):
    wl = load_workload(dlio_yaml(stem))
    if "retinanet" in stem:
        assert (wl.dataset.format, wl.dataset.num_files_train, wl.metric.au) == ("jpeg", 1170301, 0.85)
        assert wl.reader.batch_size == (24 if "b200" in stem else 32)
    res = run_iogen("validate", dlio_yaml(stem))
    assert res.returncode == 0, res.stderr


def _summary(out):
    (run,) = os.listdir(out)
    return load_summary(os.path.join(out, run))


def test_retinanet_b200_runs_scaled_down_with_dlio_overrides(dlio_yaml, tmp_path):
    over = [f"++workload.dataset.data_folder={tmp_path / 'data'}", "++workload.dataset.num_files_train=48",
            "++workload.reader.read_threads=2", "++workload.train.epochs=1",
            "++workload.workflow.generate_data=True", f"++workload.output.folder={tmp_path / 'out'}"]
    res = run_iogen("run", dlio_yaml("mlperf_v3_retinanet_b200"), *over, "-q")
    assert res.returncode in (0, 1), res.stderr  # 1: the AU gate on a loaded machine
    doc = _summary(tmp_path / "out")
    assert doc["iogen"]["complete"] and doc["iogen"]["setup"]["format"] == "jpeg"
    assert doc["iogen"]["dataset"]["bytes"] == 48 * 322957


def test_unet3d_b200_and_llama3_8b_run_scaled_down(dlio_yaml, tmp_path):
    over = [f"++workload.dataset.data_folder={tmp_path / 'data'}", "++workload.dataset.num_files_train=8",
            "++workload.dataset.record_length_bytes=65536", "++workload.dataset.record_length_bytes_stdev=0",
            "++workload.dataset.record_length_bytes_resize=0", "++workload.reader.batch_size=2",
            "++workload.reader.read_threads=1", "++workload.train.epochs=1", "++workload.train.computation_time=0.001",
            "++workload.workflow.generate_data=True", "++workload.reader.data_loader=native",
            f"++workload.output.folder={tmp_path / 'u'}"]
    res = run_iogen("run", dlio_yaml("mlperf_v3_unet3d_b200"), *over, "-q")
    assert res.returncode in (0, 1), res.stderr
    assert _summary(tmp_path / "u")["iogen"]["complete"]
    tiny = ["++workload.model.num_layers=2", "++workload.model.transformer.hidden_size=128",
            "++workload.model.transformer.ffn_hidden_size=256", "++workload.model.transformer.vocab_size=512",
            "++workload.model.transformer.num_attention_heads=4", "++workload.model.transformer.num_kv_heads=2",
            "++workload.checkpoint.num_checkpoints_write=1", "++workload.checkpoint.num_checkpoints_read=1",
            "++workload.checkpoint.time_between_checkpoints=0.01",
            f"++workload.checkpoint.checkpoint_folder={tmp_path / 'ckpt'}", f"++workload.output.folder={tmp_path / 'l'}"]
    res = run_iogen("run", dlio_yaml("mlperf_v3_llama3_8b"), *tiny)
    assert res.returncode == 0, res.stderr
    assert _summary(tmp_path / "l")["iogen"]["complete"]


# -- the fork's object-store keys (storage.storage_type s3dlio, storage_library, storage_options) -------

def _storage(*over):
    return load_workload("default", ["storage.storage_root=bkt1", *over]).storage


def test_the_forks_storage_keys_map_to_iogens():
    st = _storage("storage.storage_type=s3dlio", "storage.storage_options.endpoint_url=http://10.0.0.5:9000",
                  "storage.storage_options.region=eu-west-1")
    assert (st.storage_type, st.s3_client, st.endpoint_url, st.region) == ("s3", "s3dlio", "http://10.0.0.5:9000",
                                                                          "eu-west-1")
    st = _storage("storage.storage_type=s3", "storage.storage_library=s3torchconnector", "reader.data_loader=pytorch",
                  "storage.storage_options.endpoint_uris=[http://10.0.0.6:9000]")
    assert (st.s3_client, st.endpoint_url) == ("s3torchconnector", "http://10.0.0.6:9000")
    # several endpoints: storage.endpoint_urls (rank r uses endpoint r mod N); round_robin is what iogen does
    st = _storage("storage.storage_type=s3dlio", "storage.storage_options.load_balance_strategy=round_robin",
                  "storage.storage_options.endpoint_uris=[http://10.0.0.6:9000,http://10.0.0.7:9000]")
    assert (st.endpoint_url, st.endpoint_urls) == (None, ["http://10.0.0.6:9000", "http://10.0.0.7:9000"])
    st = _storage("storage.storage_type=s3dlio",  # one string, comma-separated (as S3_ENDPOINT_URIS has them)
                  "storage.storage_options.endpoint_uris='http://10.0.0.6:9000, http://10.0.0.7:9000'")
    assert st.endpoint_urls == ["http://10.0.0.6:9000", "http://10.0.0.7:9000"]


@pytest.mark.parametrize("over,message", [
    (["storage.storage_type=s3", "storage.storage_library=minio"], "storage.storage_library = 'minio'"),
    (["storage.storage_type=s3", "storage.storage_options.endpoint_uris=[http://a:9000,ftp://b:9000]"],
     "storage.endpoint_urls[1] = 'ftp://b:9000': give an http:// or https:// URL"),
    (["storage.storage_type=s3", "storage.storage_options.endpoint_uris=[http://a:9000,http://b:9000]",
      "storage.endpoint_url=http://a:9000"], "storage.endpoint_urls and storage.endpoint_url = 'http://a:9000' are "
                                             "both set"),
    (["storage.storage_type=s3", "storage.storage_options.load_balance_strategy=least_connections"],
     "storage.storage_options.load_balance_strategy = 'least_connections': iogen spreads requests over several "
     "endpoints round-robin per rank only"),
    (["storage.storage_type=s3", "storage.storage_options.verify_ssl=false"],
     "storage.storage_options.verify_ssl = False: not a storage option iogen knows"),
    (["storage.storage_type=s3", "storage.storage_options.secret_access_key=hunter2"],
     "storage.storage_options.secret_access_key = ***: credentials do not go in a workload file"),
    (["storage.storage_type=s3", "storage.storage_options.flavour=x"], "storage.storage_options.flavour = 'x': not"),
    (["storage.storage_type=s3dlio", "storage.s3_client=boto3"], "storage.storage_type = 's3dlio' contradicts "
                                                                  "storage.s3_client = 'boto3'"),
])
def test_the_forks_storage_keys_iogen_cannot_honour_are_refused_by_name(over, message, tmp_path):
    r = run_iogen("validate", "default", "storage.storage_root=bkt1", *over)
    assert r.returncode == 2 and message in r.stderr, r.stderr
    assert "hunter2" not in r.stderr + r.stdout and "Traceback" not in r.stderr
