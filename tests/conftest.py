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


# -- MPI: mpiexec beside this Python (or on PATH), and an environment without a launcher's variables --

def _mpiexec():
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    import shutil

    return shutil.which("mpiexec")


def _have_mpi4py():
    import importlib.util

    return importlib.util.find_spec("mpi4py") is not None


MPIEXEC = _mpiexec()  # None: no MPI here (the tests that need it skip)
HAVE_MPI = MPIEXEC is not None and _have_mpi4py()
RANK_VARS = ("PMI_", "OMPI_", "PMIX_", "MV2_", "SLURM_", "HYDRA_", "MPI_LOCAL", "FLUX_", "PALS_", "JSM_")


def clean_env(**extra):
    """This process's environment without any MPI launcher's variables, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(RANK_VARS)}
    env.pop("IOGEN_MPI", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mpirun(n, *args, timeout=240):
    """`mpiexec -n N python -m iogen ARGS...` in a clean environment; the CompletedProcess."""
    return subprocess.run([MPIEXEC, "-n", str(n), sys.executable, "-m", "iogen", *map(str, args)],
                          capture_output=True, text=True, env=clean_env(), timeout=timeout)


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


_RGW_EARLY: dict = {}  # the RGW start-up begun at collection (pytest_collection_finish), if any


def pytest_collection_finish(session):
    """Begin the session's RGW start-up (about 20 s, mostly waiting for its daemons) in a background
    thread as soon as the collected tests show one will be needed (a test id naming rgw), so it
    overlaps the first tests instead of stalling the first RGW test. rgw_server waits for it."""
    import atexit
    import importlib.util
    import tempfile
    import threading

    if os.environ.get("IOGEN_TEST_RGW") or session.config.option.collectonly \
            or importlib.util.find_spec("boto3") is None or not any("rgw" in item.nodeid for item in session.items):
        return
    rgw = _rgw_module()
    folder = tempfile.mkdtemp(prefix="iogen-test-rgw-")
    atexit.register(rgw.stop, folder)  # stop() is idempotent: by the PIDs it recorded, each checked

    def start():
        try:
            _RGW_EARLY["info"] = rgw.start(folder)
        except BaseException as exc:  # noqa: BLE001 - rgw_server raises or skips with it
            _RGW_EARLY["error"] = exc

    # not a daemon: an interpreter that exits during the start-up waits for it, then atexit stops what it started
    thread = threading.Thread(target=start, name="iogen-test-rgw-start", daemon=False)
    _RGW_EARLY.update(thread=thread, folder=folder, module=rgw)
    thread.start()


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
    if _RGW_EARLY.get("thread") is not None:  # begun at collection: wait for it
        _RGW_EARLY["thread"].join()
        rgw, folder = _RGW_EARLY["module"], _RGW_EARLY["folder"]
        error = _RGW_EARLY.get("error")
        if isinstance(error, rgw.Unavailable):
            pytest.skip(f"RGW cannot run here: {error}")
        if error is not None:
            raise error
        info = _RGW_EARLY["info"]
    else:
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
        if _RGW_EARLY.get("folder") == folder:  # made by mkdtemp, not under pytest's basetemp
            import shutil

            shutil.rmtree(folder, ignore_errors=True)


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


# -- object-storage helpers and servers beyond the plain `s3` one ---------------------------------
# A credential-checking moto server (s3_auth), a throttling proxy in front of moto (throttling_proxy),
# a moto server speaking TLS (tls_s3_server), and the overrides of a small object dataset.


def small_dataset_overrides(tmp_path, fmt="npz", data_folder="ds", **extra):
    """Overrides of a small dataset (4 `fmt` files of 4 samples of 16 KiB) in `data_folder`."""
    base = {
        "dataset.data_folder": data_folder,
        "dataset.format": fmt,
        "dataset.num_files_train": 4,
        "dataset.num_samples_per_file": 4,
        "dataset.record_length_bytes": 16384,
        "dataset.record_length_bytes_stdev": 0,
        "output.folder": str(tmp_path / "results"),
        "reader.batch_size": 2,
        "train.epochs": 2,
        "train.computation_time": 0.001,
    }
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def s3_overrides(s3, tmp_path, fmt="npz", prefix="pre", **extra):
    """Overrides of the small dataset as objects under BUCKET/PREFIX/ds in the `s3` fixture's bucket."""
    return small_dataset_overrides(tmp_path, fmt, **{"storage.storage_type": "s3",
                                                     "storage.storage_root": f"{s3.bucket}/{prefix}", **extra})


def key_of(s3, name, prefix="pre", split="train"):
    """The object key of data file `name` of s3_overrides' dataset."""
    return f"{prefix}/ds/{split}/{name}"


def result_summary(result):
    """summary.json of the run whose `results: RUN_DIR` line a finished `iogen` printed."""
    return load_summary(result.stdout.split("results: ")[1].strip())


AUTH_SETUP_REQUESTS = 3  # create a user, its access key and its policy; then every request is checked


@pytest.fixture(scope="session")
def s3_auth_server(moto_servers):
    """(endpoint, access key) of a moto server that checks credentials (IAM) after its first
    AUTH_SETUP_REQUESTS requests, which create the one user allowed to use S3."""
    import json

    import boto3

    endpoint = moto_servers({"INITIAL_NO_AUTH_ACTION_COUNT": str(AUTH_SETUP_REQUESTS)})
    iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=FAKE_ACCESS_KEY,
                       aws_secret_access_key="setup")
    iam.create_user(UserName="iogen")
    key = iam.create_access_key(UserName="iogen")["AccessKey"]
    iam.put_user_policy(UserName="iogen", PolicyName="s3", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    return endpoint, key


@pytest.fixture
def s3_auth(s3_auth_server, monkeypatch, tmp_path):
    """A bucket on the credential-checking server, with its IAM user's key in the environment."""
    import uuid

    import boto3

    endpoint, key = s3_auth_server
    env = {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
           "AWS_CONFIG_FILE": str(tmp_path / "aws-config-none"),
           "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials-none")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
    bucket = "iogen-auth-" + uuid.uuid4().hex[:8]
    client.create_bucket(Bucket=bucket)
    yield SimpleNamespace(endpoint=endpoint, bucket=bucket, secret=key["SecretAccessKey"], client=client,
                          env=env)
    client.close()


class _Throttler:
    """What the throttling proxy answers 503 SlowDown to (set by the test before iogen starts)."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.every_nth_ranged_get = 0  # 503 for every n-th GET with a Range header (0: none)
        self.always_for = None  # 503 for every request whose path holds this string
        self.ranged_gets = 0
        self.throttled = 0
        self.requests = []  # (method, path) of every request, in order

    def decide(self, method, path, headers) -> bool:
        with self.lock:
            self.requests.append((method, path))
        return self._decide(method, path, headers)

    def _decide(self, method, path, headers) -> bool:
        with self.lock:
            if self.always_for and self.always_for in path:
                self.throttled += 1
                return True
            if method == "GET" and "range" in {k.lower() for k in headers}:
                self.ranged_gets += 1
                if self.every_nth_ranged_get and self.ranged_gets % self.every_nth_ranged_get == 0:
                    self.throttled += 1
                    return True
            return False


@pytest.fixture
def throttling_proxy(s3, monkeypatch):
    """A real HTTP proxy in front of the moto server that answers some requests 503 SlowDown.

    Yields (endpoint, throttler); AWS_ENDPOINT_URL points at the proxy for this test.
    """
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    upstream = urlsplit(s3.endpoint)
    throttler = _Throttler()
    body_503 = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
                b"<Message>Please reduce your request rate.</Message></Error>")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _any(self):
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length) if length else None
            if throttler.decide(self.command, self.path, self.headers):
                self.send_response(503)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body_503)))
                self.end_headers()
                self.wfile.write(body_503)
                return
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=payload, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                        self.send_header(k, v)
                # a HEAD's answer has no body: its Content-Length is the object's size
                length = resp.getheader("Content-Length", "0") if self.command == "HEAD" else str(len(data))
                self.send_header("Content-Length", length)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
            finally:
                conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        yield endpoint, throttler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _certificates(folder):
    """A CA and a server certificate it signs for 127.0.0.1 and localhost: (cert file, key file, CA file)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def cert(subject, issuer, key, signer, ca, sans=None):
        b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
             .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)])).public_key(key.public_key())
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            b = b.add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                              content_commitment=False, key_encipherment=False, data_encipherment=False,
                                              key_agreement=False, encipher_only=False, decipher_only=False),
                                critical=True)
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return b.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = cert("iogen test CA", "iogen test CA", ca_key, ca_key, True)
    server = cert("127.0.0.1", "iogen test CA", key, ca_key, False,
                  [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "server.pem").write_bytes(server.public_bytes(pem))
    (folder / "server.key").write_bytes(key.private_bytes(pem, serialization.PrivateFormat.TraditionalOpenSSL,
                                                          serialization.NoEncryption()))
    return folder / "server.pem", folder / "server.key", folder / "ca.pem"


@pytest.fixture(scope="session")
def tls_s3_server(moto_servers, tmp_path_factory):
    """(https endpoint, CA file) of a moto server whose certificate a test CA signed (no system CA trusts it)."""
    pytest.importorskip("cryptography", reason="cryptography makes the test CA")
    tls = _certificates(tmp_path_factory.mktemp("tls"))
    return moto_servers({}, tls=tls), str(tls[2])


# -- the `storage` fixture: one test, its dataset on each kind of storage --------------------------

class StorageUnderTest:
    """Where one test's small dataset lives: on the file system (posix), in a bucket of an S3 server
    (s3: moto's; rgw: Ceph's) or in a fault-injecting folder store with no faults set (faultfs). The
    test tells iogen `overrides(...)` and reaches the bytes with read/write/remove; `where(name)` is
    how iogen names a data file in its messages (a path, or s3://bucket/key)."""

    def __init__(self, kind, tmp_path, s3=None):
        self.kind, self.tmp_path, self.s3 = kind, tmp_path, s3
        self.is_object = kind != "posix"

    def overrides(self, fmt="npz", **extra):
        if self.s3 is not None:
            return s3_overrides(self.s3, self.tmp_path, fmt, **extra)
        if self.kind == "faultfs":
            (self.tmp_path / "store" / "bkt").mkdir(parents=True, exist_ok=True)
            extra = {"storage.storage_type": "faultfs", "storage.storage_root": "bkt/pre",
                     "storage.endpoint_url": str(self.tmp_path / "store"), **extra}
            return small_dataset_overrides(self.tmp_path, fmt, **extra)
        return small_dataset_overrides(self.tmp_path, fmt, data_folder=str(self.tmp_path / "ds"), **extra)

    def root_overrides(self) -> dict:
        """This kind's storage keys (none on posix); a folder iogen is given is then folder(rel)."""
        if self.s3 is not None:
            return {"storage.storage_type": "s3", "storage.storage_root": f"{self.s3.bucket}/pre"}
        if self.kind == "faultfs":
            (self.tmp_path / "store" / "bkt").mkdir(parents=True, exist_ok=True)
            return {"storage.storage_type": "faultfs", "storage.storage_root": "bkt/pre",
                    "storage.endpoint_url": str(self.tmp_path / "store")}
        return {}

    def folder(self, rel) -> str:
        """What iogen is told for folder `rel` of this storage (an absolute path on posix, else under the root)."""
        return rel if self.is_object else str(self.tmp_path / rel)

    def read_at(self, rel) -> bytes:
        """The bytes of file `rel` (a path under the root: "ckpt/step/name")."""
        if self.s3 is not None:
            return self.s3.client.get_object(Bucket=self.s3.bucket, Key=f"pre/{rel}")["Body"].read()
        return self._root().joinpath(rel).read_bytes()

    def write_at(self, rel, data) -> None:
        """Put `data` as file `rel` (a path under the root: "ckpt/step/name"), as a user would: not through iogen."""
        if self.s3 is not None:
            self.s3.client.put_object(Bucket=self.s3.bucket, Key=f"pre/{rel}", Body=bytes(data))
            return
        path = self._root().joinpath(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(data))

    def listing(self, rel) -> dict:
        """{path under `rel`: size} of every file or object below `rel`."""
        if self.s3 is not None:
            pages = self.s3.client.get_paginator("list_objects_v2").paginate(Bucket=self.s3.bucket, Prefix=f"pre/{rel}/")
            return {o["Key"][len(f"pre/{rel}/"):]: o["Size"] for page in pages for o in page.get("Contents", ())}
        top = self._root() / rel
        return {str(p.relative_to(top)): p.stat().st_size for p in top.rglob("*") if p.is_file()}

    def _root(self):
        return self.tmp_path / "store" / "bkt" / "pre" if self.kind == "faultfs" else self.tmp_path

    def _local(self, name, split):
        return self._root() / "ds" / split / name

    def where(self, name, split="train") -> str:
        if self.s3 is not None:
            return f"s3://{self.s3.bucket}/{key_of(self.s3, name, split=split)}"
        if self.kind == "faultfs":
            return f"s3://bkt/pre/ds/{split}/{name}"  # faultfs names its objects as S3 does
        return str(self._local(name, split))

    def read(self, name, split="train") -> bytes:
        if self.s3 is not None:
            return self.s3.client.get_object(Bucket=self.s3.bucket, Key=key_of(self.s3, name, split=split))["Body"].read()
        return self._local(name, split).read_bytes()

    def write(self, name, data, split="train") -> None:
        if self.s3 is not None:
            self.s3.client.put_object(Bucket=self.s3.bucket, Key=key_of(self.s3, name, split=split), Body=bytes(data))
        else:
            self._local(name, split).write_bytes(bytes(data))

    def remove(self, name, split="train") -> None:
        if self.s3 is not None:
            self.s3.client.delete_object(Bucket=self.s3.bucket, Key=key_of(self.s3, name, split=split))
        else:
            self._local(name, split).unlink()


@pytest.fixture(params=["posix", "s3"])
def storage(request, tmp_path, monkeypatch):
    """A StorageUnderTest for each kind the test is parametrised over: posix and s3 (moto) unless it
    chooses, e.g. `@pytest.mark.parametrize("storage", ["posix", "s3", "rgw", "faultfs"], indirect=True)`
    (each object case starts real runs against a server: replace a case, do not add one)."""
    kind = request.param
    if kind in ("s3", "rgw"):
        return StorageUnderTest(kind, tmp_path, request.getfixturevalue("s3_at")("moto" if kind == "s3" else "rgw"))
    if kind == "faultfs":
        pytest.importorskip("botocore", reason="faultfs answers through the s3 backend, which needs botocore")
        monkeypatch.delenv("IOGEN_FAULTS", raising=False)
    return StorageUnderTest(kind, tmp_path)
