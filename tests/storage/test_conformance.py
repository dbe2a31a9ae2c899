"""One conformance suite every storage backend passes (fsspec's tests/abstract is the model).

Each backend is the real thing: files in a temporary folder (posix), a moto server over HTTP
(s3, and s3torchconnector whose streamed writes go through the AWS CRT), the fault-injecting
folder backend with no faults (faultfs), chosen through the registry from a workload, as the
stages choose it. Every object-store backend runs the suite twice: against moto and against a
real S3 implementation, Ceph's RGW (`@rgw`; skipped with the reason where RGW cannot start).
"""
import os
import subprocess
import sys
import threading
from iogen.common.pool import ThreadPool

import numpy as np
import pytest

from iogen.config import load_workload
from iogen.errors import DataError
from iogen.storage import backend_name, backend_names, capabilities, get_storage, storage_types

S3_PART = 5 << 20  # S3's smallest multipart part


def _payload(n: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


OBJECT_CLIENTS = ("s3", "s3torchconnector", "obstore")  # registry names of the S3 clients: each on moto and on RGW
# s3dlio's client is one per process, bound to the first endpoint it serves (iogen/storage/s3dlio_s3.py):
# it runs the suite in a child process per server (test_s3dlio_passes_the_suite_in_its_own_process), which
# sets this variable to the server; that child runs only s3dlio's cases.
S3DLIO_SERVER = os.environ.get("IOGEN_TEST_S3DLIO_SERVER")
PARAMS = ([f"s3dlio@{S3DLIO_SERVER}"] if S3DLIO_SERVER else
          ["posix", "faultfs", *OBJECT_CLIENTS, *(f"{c}@rgw" for c in OBJECT_CLIENTS)])


@pytest.fixture(params=PARAMS)
def backend(request, tmp_path, monkeypatch):
    """(storage, root): a backend chosen by get_storage from a workload, and the folder/prefix its paths go under."""
    name, _, server = request.param.partition("@")
    if name == "posix":
        wl = load_workload("default", [f"dataset.data_folder={tmp_path / 'data'}", f"output.folder={tmp_path / 'out'}"])
        root = str(tmp_path / "store") + "/"
        (tmp_path / "store").mkdir()
    elif name == "faultfs":  # no faults: the operations themselves (tests/storage/test_faultfs.py injects them)
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
        (tmp_path / "store" / "bkt").mkdir(parents=True)
        wl = load_workload("default", ["storage.storage_type=faultfs", "storage.storage_root=bkt",
                                       f"storage.endpoint_url={tmp_path / 'store'}", f"output.folder={tmp_path / 'out'}"])
        root = "s3://bkt/conf/"
    else:
        if name != "s3":
            pytest.importorskip(name, reason=f"pip install {name}")
        s3 = request.getfixturevalue("s3_at")(server or "moto")
        wl = load_workload("llama3-8b", ["storage.storage_type=s3", f"storage.storage_root={s3.bucket}/pre",
                                         f"storage.s3_client={'boto3' if name == 's3' else name}",
                                         f"output.folder={tmp_path / 'out'}"])
        root = f"s3://{s3.bucket}/conf/"
    assert backend_name(wl) == name
    st = get_storage(wl, threads=4)
    assert st.name == name and type(st).capabilities is capabilities(wl)
    st.drain()  # the check's HEAD is not this suite's
    yield st, root
    st.close()


def test_registry_names_are_what_the_config_accepts():
    assert {"posix", "s3", "s3torchconnector", "faultfs"} <= set(backend_names())
    assert {"local_fs", "s3", "faultfs"} <= set(storage_types())


def test_publish_then_stat_read_and_list(backend):
    st, root = backend
    data = _payload(10_000)
    st.publish(root + "a/one.bin", data)
    st.publish(root + "a/two.bin", data[:123])
    assert st.stat(root + "a/one.bin") == data.size
    assert st.stat(root + "a/missing.bin") is None
    buf = np.zeros(100, np.uint8)
    assert st.readinto(root + "a/one.bin", 5000, buf) == 100
    assert np.array_equal(buf, data[5000:5100])
    assert st.list(root + "a/") == {root + "a/one.bin": data.size, root + "a/two.bin": 123}


def test_read_ranges_many_ranges_into_one_buffer(backend):
    st, root = backend
    a, b = _payload(4096, 2), _payload(3000, 3)
    st.publish(root + "a.bin", a)
    st.publish(root + "b.bin", b)
    paths = [root + "a.bin", root + "b.bin", root + "a.bin", root + "b.bin"]
    offs, lens = np.array([0, 100, 4000, 2990]), np.array([10, 200, 96, 10])
    at = np.array([0, 10, 210, 306])
    buf = np.full(316, 7, np.uint8)
    assert st.read_ranges(paths, offs, lens, buf, at) == 316
    want = np.concatenate([a[:10], b[100:300], a[4000:4096], b[2990:3000]])
    assert np.array_equal(buf, want)


def test_handles_read_many_ranges_into_one_buffer(backend):
    """What a loader keeps per file between batches: handles opened once, every range of a batch read
    through them in one read_handles call (POSIX: one core call), then closed."""
    st, root = backend
    a, b = _payload(4096, 4), _payload(3000, 5)
    st.publish(root + "a.bin", a)
    st.publish(root + "b.bin", b)
    ha, hb = st.open_handle(root + "a.bin"), st.open_handle(root + "b.bin")
    try:
        handles = np.array([ha, hb, ha, hb], np.int64)
        offs, lens = np.array([0, 100, 4000, 2990], np.int64), np.array([10, 200, 96, 10], np.int64)
        buf = np.full(316, 7, np.uint8)
        assert st.read_handles(handles, offs, lens, lens, buf, np.array([0, 10, 210, 306], np.int64)) == 316
        assert np.array_equal(buf, np.concatenate([a[:10], b[100:300], a[4000:4096], b[2990:3000]]))
    finally:
        st.close_handle(ha)
        st.close_handle(hb)


def test_a_read_past_the_end_is_a_data_error_naming_the_path(backend):
    st, root = backend
    st.publish(root + "short.bin", _payload(100))
    with pytest.raises(DataError, match="short.bin"):
        st.readinto(root + "short.bin", 50, np.zeros(100, np.uint8))


def test_a_connection_that_ends_inside_a_body_is_a_data_error(monkeypatch):
    """The `s3` backend reads a GET's body straight into the caller's buffer (s3._read_body): a server that
    closes the connection after half the body it announced is exit 2 naming the key, not a traceback."""
    pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
    import socket

    from iogen.storage.s3 import ObjectStore

    server = socket.create_server(("127.0.0.1", 0))
    head = (b"HTTP/1.1 206 Partial Content\r\nContent-Length: 1000\r\nContent-Range: bytes 0-999/4000\r\n"
            b"x-amz-request-id: 1\r\n\r\n")

    def serve():
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(head + b"x" * 500)  # then closed: 500 of 1000 bytes

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    st = ObjectStore(f"http://127.0.0.1:{server.getsockname()[1]}", "us-east-1", "path", max_attempts=1)
    try:
        with pytest.raises(DataError, match=r"s3://bkt/k\.bin.*GET of bytes 0-999 failed at .*IncompleteRead"):
            st.readinto("s3://bkt/k.bin", 0, np.zeros(1000, np.uint8))
    finally:
        thread.join(5)
        server.close()
    assert st.drain()["get"]["errors"] == 1


def test_open_is_a_seekable_binary_file(backend):
    st, root = backend
    data = _payload(70_000, 4)
    st.publish(root + "f.bin", data)
    with st.open(root + "f.bin") as f:
        assert f.seekable()
        f.seek(65_000)
        assert f.read(10) == data[65_000:65_010].tobytes()
        f.seek(0)
        assert f.read() == data.tobytes()


def test_write_stream_writes_every_part_and_nothing_on_failure(backend):
    st, root = backend
    part = S3_PART if not st.capabilities.local_paths else 64 << 10
    size = 2 * part + 12345
    parts = [_payload(part, 10 + i) for i in range(3)]
    with ThreadPool(3) as pool:
        assert st.write_stream(root + "ck/a.ckpt", size, part, lambda i: parts[i], pool) == size
        got = np.zeros(size, np.uint8)
        st.readinto(root + "ck/a.ckpt", 0, got)
        assert np.array_equal(got, np.concatenate(parts)[:size])

        def fails(i):
            if i == 1:
                raise RuntimeError("part 1 failed")
            return parts[i]

        with pytest.raises(RuntimeError, match="part 1 failed"):
            st.write_stream(root + "ck/b.ckpt", size, part, fails, pool)
    assert st.stat(root + "ck/b.ckpt") is None
    assert list(st.list(root + "ck/")) == [root + "ck/a.ckpt"]  # no temporary name left behind


def test_write_objects_and_read_them_back(backend):
    """Several at once (the checkpoint writer's and restore's calls); a failure leaves none of the unfinished."""
    st, root = backend
    part = S3_PART if not st.capabilities.local_paths else 64 << 10
    items = [(root + "ckpt/a.pt", part + 100), (root + "ckpt/b.pt", 300)]
    content = {j: [_payload(part, 20 + 4 * j + i) for i in range(2)] for j in range(2)}
    local = threading.local()
    with ThreadPool(2) as pool:
        assert st.write_objects(items, part, lambda j, i: content[j][i][:min(part, items[j][1] - i * part)],
                                pool) == part + 400

        def buffer():
            if getattr(local, "buf", None) is None:
                local.buf = np.empty(part, np.uint8)
            return local.buf

        assert st.read_objects(items, part, pool, buffer) == part + 400
        for j, (path, size) in enumerate(items):
            got = np.zeros(size, np.uint8)
            st.readinto(path, 0, got)
            assert np.array_equal(got, np.concatenate(content[j])[:size])
        if hasattr(st, "get_range"):  # obstore's and s3dlio's restore: each part left in the client's buffer
            data, _ = st.get_range(items[0][0], part - 10, 110)
            assert bytes(data) == np.concatenate(content[0])[part - 10:part + 100].tobytes()
            with pytest.raises(DataError, match="ends before byte"):
                st.get_range(items[1][0], 200, 200)

        def fails(j, i):
            if (j, i) == (0, 1):
                raise RuntimeError("a part failed")
            return content[j][i][:min(part, items[j][1] - i * part)]

        with pytest.raises(RuntimeError, match="a part failed"):
            st.write_objects([(root + "ckpt2/a.pt", part + 100)], part, fails, pool)
        with pytest.raises(DataError, match="ckpt/missing.pt"):
            st.read_objects([(root + "ckpt/missing.pt", 10)], part, pool, buffer)
    assert st.stat(root + "ckpt2/a.pt") is None


def test_copy_out_and_in_round_trip(backend, tmp_path):
    st, root = backend
    data = _payload(S3_PART + 777, 5)  # over one S3 part: a multipart upload there
    local = tmp_path / "local.bin"
    local.write_bytes(data.tobytes())
    assert st.copy_out(str(local), root + "drained.bin", S3_PART) == data.size
    assert st.stat(root + "drained.bin") == data.size
    back = tmp_path / "staged.bin"
    assert st.copy_in(root + "drained.bin", str(back)) == data.size
    assert back.read_bytes() == data.tobytes()


def test_a_generation_publishes_whole_files_and_tells_a_rerun_which_are_complete(backend):
    from iogen.common.checksum import crc32c, format_crc
    from iogen.data.manifest import file_entry, journal_line

    st, root = backend
    folder, params = root + "gen", {"seed": 1}
    image, streamed = _payload(3000), _payload(70_000, seed=2)

    def write(path):
        with open(path, "wb") as f:
            f.write(streamed.tobytes())
        return streamed.size, crc32c(streamed)

    st.make_folder(folder)  # where folders exist (the stage makes the split's)
    gen = st.generation(folder, params, 0, 1)
    gen.check(False)
    gen.start([])
    try:
        line, crc_at = journal_line("f_0_of_2.npz", image.size, image.size, 1)
        crc = gen.publish_image(f"{folder}/f_0_of_2.npz", image, False, line, crc_at, image.size, "data file 0")
        size, crc2 = gen.publish_written(f"{folder}/f_1_of_2.npz", write, streamed.size, "data file 1", False)
        gen.record(file_entry("f_1_of_2.npz", size, format_crc(crc2), streamed.size, 1))
    finally:
        gen.close()
    assert (crc, size, crc2) == (crc32c(image), streamed.size, crc32c(streamed))
    assert st.get_bytes(f"{folder}/f_0_of_2.npz") == image.tobytes()
    assert st.get_bytes(f"{folder}/f_1_of_2.npz") == streamed.tobytes()
    rels = ["f_0_of_2.npz", "f_1_of_2.npz"]
    again = st.generation(folder, params, 0, 1)  # what a rerun learns: from records beside the data, or the data
    complete = {rel: e["crc32c"] for rel, e in again.listed().items()}
    complete.update(again.marks([r for r in rels if r not in complete]))
    assert complete == {"f_0_of_2.npz": format_crc(crc), "f_1_of_2.npz": format_crc(crc2)}
    other = st.generation(folder, {"seed": 2}, 0, 1)  # nothing is complete for other settings
    assert other.listed() == {} and not any(other.marks(rels).values())
    again.finish()
    assert sorted(st.list(folder + "/")) == [f"{folder}/{r}" for r in rels]  # no record left, no temporary


def test_a_generation_publishes_an_image_recipe_as_its_built_bytes(backend):
    """Format.file_recipe's recipe (JPEG, PNG): built and published (POSIX: one core call), the bytes file_image gives."""
    from iogen.common.checksum import crc32c
    from iogen.data.manifest import journal_line
    from iogen.formats import make_format

    st, root = backend
    folder, fmt = root + "img", make_format("png", samples_per_file=1)
    want = bytes(fmt.file_image(1, 5000, 3, 4))
    st.make_folder(folder)
    gen = st.generation(folder, {"seed": 3}, 0, 1)
    gen.check(False)
    gen.start([])
    try:
        line, crc_at = journal_line("f_0_of_1.png", 5000, 5000, 1)
        crc = gen.publish_image(f"{folder}/f_0_of_1.png", fmt.file_recipe(1, 5000, 3, 4), False, line, crc_at, 5000,
                                "data file 0")
        # a run of recipes sharing one buffer (publish_images: POSIX one core call), each its own stream
        from iogen.data.manifest import journal_lines

        names = [f"r_{k}_of_3.png" for k in range(3)]
        lines, ends, ats = journal_lines(names, [5000] * 3, [5000] * 3, 1)
        first = fmt.file_recipe(1, 5000, 3, 10)
        run = [type(first)(first.buf, first.ops, first.blob, 3, 10 + k) for k in range(3)]
        crcs = gen.publish_images([f"{folder}/{n}" for n in names], run, False, lines, ends, ats, [5000] * 3,
                                  ["data file 0", "data file 1", "data file 2"])
    finally:
        gen.close()
    assert st.get_bytes(f"{folder}/f_0_of_1.png") == want and crc == crc32c(want)
    for k, name in enumerate(names):
        data = bytes(fmt.file_image(1, 5000, 3, 10 + k))
        assert st.get_bytes(f"{folder}/{name}") == data and crcs[k] == crc32c(data)


def test_whole_bytes_crc_and_a_read_that_tells_the_size(backend):
    """get_bytes and crc32c (manifests and `iogen verify`), read_range (staging's parts)."""
    from iogen.common.checksum import crc32c

    st, root = backend
    data = _payload(70_000, 6)
    st.publish(root + "whole.bin", data)
    assert st.get_bytes(root + "whole.bin") == data.tobytes()
    assert st.get_bytes(root + "absent.bin") is None
    assert st.crc32c(root + "whole.bin") == crc32c(data.tobytes())
    buf = np.zeros(1000, np.uint8)
    got, total = st.read_range(root + "whole.bin", 69_000, buf)
    assert got == 1000 and total in (None, data.size) and np.array_equal(buf, data[69_000:])
    assert st.upload_part_bytes(4096) >= 4096
    st.prepare_thread()  # a client made now, or nothing to make


def test_remove(backend):
    st, root = backend
    st.publish(root + "gone.bin", b"x" * 10)
    st.remove(root + "gone.bin")
    assert st.stat(root + "gone.bin") is None
    st.remove(root + "gone.bin")  # absent is fine


def test_figures_are_what_the_capabilities_say(backend):
    st, root = backend
    st.publish(root + "fig.bin", _payload(1000))
    st.readinto(root + "fig.bin", 0, np.zeros(500, np.uint8))
    figures = st.drain()
    if "requests" in st.capabilities.figures:
        assert figures["get"]["requests"] == 1 and figures["get"]["bytes"] == 500
        assert figures["put"]["requests"] == 1
        assert st.drain() == {}  # reset
    else:
        assert figures == {}


@pytest.mark.skipif(S3DLIO_SERVER is not None, reason="the child process itself")
def test_s3dlio_passes_the_suite_in_its_own_process(request, tmp_path):
    """The suite's cases with storage.s3_client=s3dlio, in a child pytest (its client is one per process),
    against this session's RGW: a real server; against moto only where RGW cannot start (one child pytest
    with its own server is ~10 s, and moto adds nothing RGW does not check)."""
    pytest.importorskip("s3dlio", reason="pip install s3dlio")
    try:
        env = {**os.environ, "IOGEN_TEST_S3DLIO_SERVER": "rgw", "IOGEN_TEST_RGW": request.getfixturevalue("rgw_server")["dir"]}
    except pytest.skip.Exception as why:
        print(f"s3dlio's suite runs against moto: {why}")
        env = {**os.environ, "IOGEN_TEST_S3DLIO_SERVER": "moto"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                        "--rootdir", str(request.config.rootpath), __file__, "-k", "not in_its_own_process and not registry"],
                       capture_output=True, text=True, env=env, timeout=280, cwd=str(request.config.rootpath))
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert " passed" in r.stdout and "skipped" not in r.stdout and "deselected" in r.stdout, tail


if S3DLIO_SERVER:  # only in the s3dlio child process (its client is bound there)
    def test_s3dlio_refuses_a_second_endpoint_in_one_process(backend, tmp_path):
        """s3dlio's client is one per process: a storage on another endpoint is a ConfigError naming both."""
        from iogen.errors import ConfigError

        st, root = backend
        st.publish(root + "bound.bin", b"x")  # s3dlio's client is made and bound here
        other = load_workload("llama3-8b", ["storage.storage_type=s3", "storage.storage_root=another-bucket",
                                            "storage.s3_client=s3dlio", "storage.endpoint_url=http://127.0.0.1:9",
                                            f"output.folder={tmp_path / 'out2'}"])
        with pytest.raises(ConfigError, match=r"bound to http://127\.0\.0\.1:\d+ .*cannot also use http://127\.0\.0\.1:9 "):
            get_storage(other, check=False).publish("s3://another-bucket/x.bin", b"x")
