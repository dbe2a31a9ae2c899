"""Shared fixtures: tiny workloads in temporary folders, and running the real `iogen` command."""
import json
import os
import signal
import subprocess
import sys

from types import SimpleNamespace

import pytest

# Tests import the installed package, never the source tree: child Pythons started from the
# repository root would otherwise put the checkout's `iogen/` (no compiled core, no bundled
# workloads) first on sys.path. PYTHONSAFEPATH (Python >= 3.11) stops that for every
# subprocess, mpiexec's ranks included.
os.environ["PYTHONSAFEPATH"] = "1"
# An internal error (a bug) prints one line and exit 3; in tests its traceback is printed too.
os.environ["IOGEN_TRACEBACK"] = "1"


def tiny_overrides(tmp_path, **extra):
    """Overrides that shrink the default workload to a few small files under tmp_path."""
    base = {
        "dataset.data_folder": str(tmp_path / "data"),
        "output.folder": str(tmp_path / "results"),
        "dataset.num_files_train": 8,
        "dataset.record_length_bytes": 65536,
        "dataset.record_length_bytes_stdev": 0,
        "reader.batch_size": 2,
        "train.epochs": 2,
        "train.computation_time": 0.001,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


@pytest.fixture
def tiny(tmp_path):
    """Factory of override lists for a tiny default workload."""
    return lambda **extra: tiny_overrides(tmp_path, **extra)


def run_iogen(*args, env=None, timeout=240, cwd=None):
    """Run the installed `iogen` command in a subprocess; returns CompletedProcess."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    iogen = os.path.join(os.path.dirname(sys.executable), "iogen")  # the installed console script
    return subprocess.run(
        [iogen, *map(str, args)],
        capture_output=True, text=True, env=full_env, timeout=timeout, cwd=cwd,
    )


IOGEN = os.path.join(os.path.dirname(sys.executable), "iogen")  # the installed console script
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_signals(sigs=SIGNALS):
    """A preexec_fn: the child starts with these signals' default dispositions, unblocked.

    A test runner started under `nohup`, or as a background job of a non-interactive shell,
    ignores SIGHUP or SIGINT, and a child inherits an ignored disposition (iogen, like Python,
    keeps it: that is what nohup asks for). A test that sends a signal starts its child with
    this, so it tests iogen, not how the suite was started.
    """
    def reset():
        for sig in sigs:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    return reset


def popen_iogen(*args, sigs=SIGNALS, **kwargs):
    """Start the installed `iogen ARGS...` (pipes for its output) with `sigs` at their defaults."""
    return subprocess.Popen([IOGEN, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals(sigs), **kwargs)


def ignored_signals(pid: int) -> set:
    """The signals process `pid` ignores or blocks (/proc/PID/status SigIgn, SigBlk; Linux)."""
    out = set()
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(("SigIgn:", "SigBlk:")):
                mask = int(line.split()[1], 16)
                out |= {sig for sig in range(1, 65) if mask >> (sig - 1) & 1}
    return out


@pytest.fixture
def iogen_cmd():
    """Run `iogen ARGS...` as a user would."""
    return run_iogen


def load_summary(run_dir):
    """summary.json of a run folder."""
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _workload_standin(seed=42, **over):
    base = dict(format="npz", data_folder="data", num_files_train=4, num_files_eval=0,
                num_samples_per_file=3, record_length_bytes=1000, record_length_bytes_stdev=0,
                num_subfolders_train=0, num_subfolders_eval=0, file_prefix="img",
                compression="none", compression_level=4, enable_chunking=False, chunk_size=0,
                record_dims=None, record_element_type="uint8")
    base.update(over)
    return SimpleNamespace(dataset=SimpleNamespace(**base), train=SimpleNamespace(seed=seed))


@pytest.fixture
def workload():
    """Factory of stand-ins for a Workload: DLIO's dataset field names and train.seed, unvalidated.

    Format and datagen tests use it to reach layouts the config would reject on purpose.
    """
    return _workload_standin


class FileOpens:
    """Every open(2) of a file in the watched folders, counted by name (Linux inotify, IN_OPEN).

    Real kernel events, read after the fact from inotify's queue: tests use it to check which
    files a run opened (e.g. that a staged run never reads the shared copy).
    """

    IN_OPEN = 0x20

    def __init__(self, folders):
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            pytest.skip("inotify is not available here")
        self.names = {}
        for folder in folders:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(str(folder)), self.IN_OPEN)
            assert wd >= 0, f"inotify_add_watch({folder}) failed"
            self.names[wd] = str(folder)

    def counts(self) -> dict:
        """{path: opens so far}; drains the queue, so call it once, after the run."""
        import struct

        out = {}
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            pos = 0
            while pos < len(data):
                wd, _mask, _cookie, length = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16:pos + 16 + length].rstrip(b"\0").decode()
                pos += 16 + length
                if name:  # an open of the folder itself has no name
                    path = os.path.join(self.names[wd], name)
                    out[path] = out.get(path, 0) + 1
        os.close(self.fd)
        return out


@pytest.fixture
def file_opens():
    """Factory: FileOpens(folders) starts counting opens in those folders."""
    return FileOpens


def tree_state(root, skip=()) -> dict:
    """Every entry under root: {relative path: file bytes, ('link', target) or 'dir'}, symlinks not
    followed; `skip`: relative folder paths left out. Compare two calls to show nothing changed."""
    out = {}
    root = str(root)
    for folder, dirs, files in os.walk(root):
        rel_folder = os.path.relpath(folder, root)
        dirs[:] = [d for d in dirs if os.path.normpath(os.path.join(rel_folder, d)) not in skip]
        for name in dirs + files:
            path = os.path.join(folder, name)
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if os.path.islink(path):
                out[rel] = ("link", os.readlink(path))
            elif os.path.isdir(path):
                out[rel] = "dir"
            else:
                with open(path, "rb") as fh:
                    out[rel] = fh.read()
    return out


# -- a real S3 server: moto's standalone server on 127.0.0.1 --------------------------------------
# No mocked client: boto3 (in the test and in the `iogen` child processes) talks HTTP to a separate
# server process. One server per test session; each test gets its own bucket.

FAKE_ACCESS_KEY = "AKIAIOGENTESTKEY0001"
MOTO_STARTUP_TIMEOUT_S = 30


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_servers(tmp_path_factory):
    """start(env_extra) -> the endpoint of a new moto server (with those environment variables),
    every one stopped at the session's end. Skips without boto3 and moto[server]."""
    import time
    import urllib.request

    pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
    pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")
    started = []

    def start(env_extra: dict, tls=None) -> str:
        """tls: (certificate file, key file, CA file): the server speaks https with that certificate."""
        import ssl

        port = _free_port()
        log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
        args = ["-c", str(tls[0]), "-k", str(tls[1])] if tls else []
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port), *args],
                                stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env_extra})
        started.append((proc, log))
        endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        context = ssl.create_default_context(cafile=str(tls[2])) if tls else None
        deadline = time.monotonic() + MOTO_STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1, context=context).close()
                return endpoint
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not answer on {endpoint} in {MOTO_STARTUP_TIMEOUT_S} s")
                time.sleep(0.1)

    try:
        yield start
    finally:
        for proc, log in started:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


@pytest.fixture(scope="session")
def s3_server(moto_servers):
    """The endpoint URL of a moto server started for the session."""
    return moto_servers({})


# -- a real S3 implementation: Ceph's RADOS Gateway (tests/servers/rgw.py) -----------------------
# Started once per test run, in a scratch folder, on the first test that asks for it; stopped at the
# session's end (a failure or Ctrl-C included: pytest tears session fixtures down then; an exit
# handler covers the rest). Where it cannot start (not root and no Ceph packages, no apt-get, a
# daemon that fails) the tests that need it skip with the reason; the rest of the suite runs.
# IOGEN_TEST_RGW=DIR uses a server already started by `python tests/servers/rgw.py start DIR`
# (left running: its starter stops it), to save the start-up when running a few tests by hand.

def _rgw_module():
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "servers", "rgw.py")
    spec = importlib.util.spec_from_file_location("iogen_tests_rgw", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def rgw_server(tmp_path_factory):
    """{endpoint, access_key, secret_key} of a Ceph RGW started for the session, or a skip naming why not."""
    import atexit

    pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
    rgw = _rgw_module()
    reuse = os.environ.get("IOGEN_TEST_RGW")
    if reuse:
        try:
            with open(os.path.join(reuse, "endpoint.json"), encoding="utf-8") as fh:
                yield json.load(fh)
        except OSError as exc:
            pytest.skip(f"RGW: IOGEN_TEST_RGW={reuse}: no server started there ({exc.strerror})")
        return
    folder = str(tmp_path_factory.mktemp("rgw"))
    atexit.register(rgw.stop, folder)  # stop() is idempotent: by the PIDs it recorded, each checked
    try:
        info = rgw.start(folder)
    except rgw.Unavailable as exc:
        pytest.skip(f"RGW cannot run here: {exc}")
    try:
        yield info
    finally:
        rgw.stop(folder)


S3_SERVERS = ("moto", "rgw")  # what the `s3` fixture's parameter names; moto when a test does not choose


@pytest.fixture
def s3_at(request, monkeypatch, tmp_path):
    """s3_at(server) -> the `s3` namespace on that server ("moto" or "rgw"), for fixtures that choose
    the server themselves (the storage conformance suite); each bucket is emptied and dropped after an
    RGW test (one RGW serves the whole run)."""
    import uuid

    import boto3

    made = []

    def at(kind: str):
        if kind == "rgw":
            info = request.getfixturevalue("rgw_server")
            endpoint, access_key, secret = info["endpoint"], info["access_key"], info["secret_key"]
        else:
            assert kind == "moto", f"s3 servers are {S3_SERVERS}, not {kind!r}"
            endpoint, access_key = request.getfixturevalue("s3_server"), FAKE_ACCESS_KEY
            secret = "iogenSECRETmarker" + uuid.uuid4().hex  # moto takes any: a marker to look for
        env = {
            "AWS_ACCESS_KEY_ID": access_key,
            "AWS_SECRET_ACCESS_KEY": secret,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint,
            # no ~/.aws files of the machine running the tests
            "AWS_CONFIG_FILE": str(tmp_path / "aws-config-none"),
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials-none"),
        }
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
        bucket = "iogen-" + uuid.uuid4().hex[:12]
        client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                              aws_access_key_id=access_key, aws_secret_access_key=secret)
        client.create_bucket(Bucket=bucket)
        made.append((kind, client, bucket))
        return SimpleNamespace(endpoint=endpoint, bucket=bucket, secret=secret, client=client, env=env,
                               server=kind)

    yield at
    for kind, client, bucket in made:
        if kind == "rgw":
            _empty_bucket(client, bucket)
        client.close()


@pytest.fixture
def s3(request, s3_at):
    """Endpoint, fresh bucket and credentials in the environment (the AWS chain iogen uses).

    The server is moto's, or Ceph's RGW where the test parametrises it (indirectly):
    `@pytest.mark.parametrize("s3", ["moto", "rgw"], indirect=True)` (each RGW case costs real
    seconds: the suite runs one case per stage against it, not the full matrix).

    A namespace: endpoint, bucket, secret (a marker value to look for in written files: moto takes
    any secret, so a fresh one; RGW's user has its own), client (a boto3 client on the server), env
    (the variables, for child processes), server ("moto" or "rgw").
    """
    return s3_at(getattr(request, "param", "moto"))


def _empty_bucket(client, bucket) -> None:
    """Delete every object, unfinished upload and then the bucket (RGW's memstore holds them in memory)."""
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", ())]
        if keys:
            client.delete_objects(Bucket=bucket, Delete={"Objects": keys, "Quiet": True})
    for up in client.list_multipart_uploads(Bucket=bucket).get("Uploads", ()):
        client.abort_multipart_upload(Bucket=bucket, Key=up["Key"], UploadId=up["UploadId"])
    client.delete_bucket(Bucket=bucket)
