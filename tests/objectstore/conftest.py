"""A real S3 server for the object-storage tests: moto's standalone server on 127.0.0.1.

No mocked client: boto3 (in the test and in the `iogen` child processes) talks HTTP to a
separate server process. One server per test session; each test gets its own bucket.
"""
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest

boto3 = pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")

FAKE_ACCESS_KEY = "AKIAIOGENTESTKEY0001"
STARTUP_TIMEOUT_S = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """(endpoint URL) of a moto server started for the session, stopped at its end."""
    yield from _server(tmp_path_factory, {})


@pytest.fixture(scope="session")
def s3_auth_server(tmp_path_factory):
    """(endpoint, access key) of a moto server that checks credentials (IAM) after its first
    AUTH_SETUP_REQUESTS requests, which create the one user allowed to use S3."""
    import json

    for endpoint in _server(tmp_path_factory, {"INITIAL_NO_AUTH_ACTION_COUNT": str(AUTH_SETUP_REQUESTS)}):
        iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=FAKE_ACCESS_KEY,
                           aws_secret_access_key="setup")
        iam.create_user(UserName="iogen")
        key = iam.create_access_key(UserName="iogen")["AccessKey"]
        iam.put_user_policy(UserName="iogen", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        yield endpoint, key


AUTH_SETUP_REQUESTS = 3  # create a user, its access key and its policy; then every request is checked


def _server(tmp_path_factory, env_extra):
    port = _free_port()
    log = open(tmp_path_factory.mktemp("moto") / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env_extra})
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not answer on {endpoint} in {STARTUP_TIMEOUT_S} s")
                time.sleep(0.1)
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture
def s3(s3_server, monkeypatch, tmp_path):
    """Endpoint, fresh bucket and fake credentials in the environment (the AWS chain iogen uses).

    Yields a namespace: endpoint, bucket, secret (a marker value to look for in written files),
    client (a boto3 client on the server), env (the variables, for child processes).
    """
    from types import SimpleNamespace

    secret = "iogenSECRETmarker" + uuid.uuid4().hex
    env = {
        "AWS_ACCESS_KEY_ID": FAKE_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_server,
        # no ~/.aws files of the machine running the tests
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config-none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-credentials-none"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    bucket = "iogen-" + uuid.uuid4().hex[:12]
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1",
                          aws_access_key_id=FAKE_ACCESS_KEY, aws_secret_access_key=secret)
    client.create_bucket(Bucket=bucket)
    yield SimpleNamespace(endpoint=s3_server, bucket=bucket, secret=secret, client=client, env=env)
    client.close()


@pytest.fixture
def s3_auth(s3_auth_server, monkeypatch, tmp_path):
    """A bucket on the credential-checking server, with its IAM user's key in the environment."""
    from types import SimpleNamespace

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
