"""The object-storage tests: a credential-checking moto server and a throttling proxy.

The moto server itself and the `s3` fixture (a fresh bucket, the AWS variables set) are
tests/conftest.py's, shared with the storage conformance suite (tests/storage/).
"""
import uuid

import pytest

boto3 = pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")

from ..conftest import FAKE_ACCESS_KEY  # the setup requests' key: the server checks none before its IAM user exists

AUTH_SETUP_REQUESTS = 3  # create a user, its access key and its policy; then every request is checked


@pytest.fixture(scope="session")
def s3_auth_server(moto_servers):
    """(endpoint, access key) of a moto server that checks credentials (IAM) after its first
    AUTH_SETUP_REQUESTS requests, which create the one user allowed to use S3."""
    import json

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
