"""Real stores' TLS (a CA bundle, the opt-out, verification on by default) and several endpoints (rank r talks
to endpoint r mod N; every endpoint checked before any work; requests counted per endpoint)."""
import importlib.util
import uuid
from types import SimpleNamespace

import pytest

from iogen.config import load_workload
from iogen.errors import ConfigError
from iogen.storage import get_storage
from iogen.storage.endpoints import endpoint_of

from ..conftest import _free_port, run_iogen, s3_overrides

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")


@pytest.fixture
def tls_s3(tls_s3_server, monkeypatch, tmp_path):
    """A bucket on the https moto server (its certificate signed by a test CA), the AWS variables set."""
    import boto3

    endpoint, ca = tls_s3_server
    env = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION":
           "us-east-1", "AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    for k in ("AWS_ENDPOINT_URL", "AWS_CA_BUNDLE", "AWS_PROFILE", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        monkeypatch.delenv(k, raising=False)
    bucket = "iogen-tls-" + uuid.uuid4().hex[:8]
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", verify=ca).create_bucket(Bucket=bucket)
    return SimpleNamespace(endpoint=endpoint, ca=ca, bucket=bucket, env=env)


def _wl(bucket, *over):
    return load_workload("default", ["storage.storage_type=s3", f"storage.storage_root={bucket}", *over])


# -- TLS ---------------------------------------------------------------------------------------------------

def test_certificates_are_verified_by_default_and_a_failure_names_the_key(tls_s3):
    with pytest.raises(ConfigError, match=r"storage.verify_tls: TLS with the object store at https://127.0.0.1:\d+ "
                                          r"failed .*certificate.*storage.ca_bundle"):
        get_storage(_wl(tls_s3.bucket, f"storage.endpoint_url={tls_s3.endpoint}"))


@pytest.mark.parametrize("client", ["boto3", "obstore"])
@pytest.mark.parametrize("tls", ["ca_bundle", "no_verify"])
def test_a_ca_bundle_or_the_opt_out_reaches_every_client(tls_s3, client, tls):
    if client != "boto3" and importlib.util.find_spec(client) is None:
        pytest.skip(f"pip install {client}")
    setting = f"storage.ca_bundle={tls_s3.ca}" if tls == "ca_bundle" else "storage.verify_tls=false"
    wl = _wl(tls_s3.bucket, f"storage.endpoint_url={tls_s3.endpoint}", f"storage.s3_client={client}", setting)
    st = get_storage(wl)  # the bucket HEAD: boto3 with verify= the bundle, or False
    assert st.client()._endpoint.http_session._verify == (tls_s3.ca if tls == "ca_bundle" else False)
    uri = f"s3://{tls_s3.bucket}/k"
    st.publish(uri, b"0123456789")  # the client's own PUT and GET over https
    buf = bytearray(4)
    assert st.readinto(uri, 3, buf) == 4 and bytes(buf) == b"3456"
    assert st.drain()["get"]["requests"] == 1


def test_tls_settings_are_validated_naming_the_key(tmp_path):
    missing = tmp_path / "no-such-ca.pem"
    not_pem = tmp_path / "ca.txt"
    not_pem.write_text("not a certificate\n")
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    for over, message in (
            ([f"storage.ca_bundle={missing}"], f"storage.ca_bundle = '{missing}' does not exist"),
            ([f"storage.ca_bundle={not_pem}"], "holds no PEM certificate"),
            (["storage.verify_tls=false", f"storage.ca_bundle={not_pem}"], "with storage.verify_tls = False"),
            (["storage.verify_tls=false", "storage.s3_client=s3dlio"],
             "storage.verify_tls = False: storage.s3_client = 's3dlio' has no way to skip certificate verification"),
            ([f"storage.ca_bundle={pem}", "storage.s3_client=s3torchconnector",
              "reader.data_loader=pytorch"], "storage.s3_client = 's3torchconnector' takes no CA bundle"),
            (["storage.storage_type=local_fs", "storage.verify_tls=false"],
             "storage.verify_tls = False applies to storage.storage_type s3 only")):
        with pytest.raises(ConfigError) as exc:
            _wl("bkt1", *over)
        assert message in str(exc.value), (over, str(exc.value))
    r = run_iogen("validate", "default", "storage.storage_type=s3", "storage.storage_root=bkt1",
                  f"storage.ca_bundle={missing}")  # the command: exit 2, one line naming the key
    assert r.returncode == 2 and r.stderr.startswith(f"iogen: error: storage.ca_bundle = '{missing}' does not exist")
    assert "Traceback" not in r.stderr


# -- several endpoints -------------------------------------------------------------------------------------

def test_rank_r_uses_endpoint_r_mod_n():
    st = _wl("bkt1", "storage.endpoint_urls=[http://a:1,http://b:2,http://c:3]").storage
    assert [endpoint_of(st, r) for r in range(5)] == ["http://a:1", "http://b:2", "http://c:3", "http://a:1",
                                                       "http://b:2"]
    assert endpoint_of(st) == "http://a:1"  # this process: a world of one, rank 0
    assert endpoint_of(_wl("bkt1", "storage.endpoint_url=http://a:1").storage, 3) == "http://a:1"


def test_every_endpoint_is_checked_before_any_work(s3, tmp_path):
    down = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    over = s3_overrides(s3, tmp_path, "npz", **{"storage.endpoint_urls": f"[{s3.endpoint},{down}]"})
    r = run_iogen("datagen", "default", *over, "-q")
    assert r.returncode == 2 and f"storage.endpoint_urls: cannot reach the object store at {down}" in r.stderr, \
        r.stderr
    assert "Traceback" not in r.stderr
    assert "Contents" not in s3.client.list_objects_v2(Bucket=s3.bucket)  # nothing written anywhere


S3DLIO_CHILD = """
import sys
from iogen.config import load_workload
from iogen.errors import DataError
from iogen.storage import get_storage
endpoint, bucket, ca = sys.argv[1:4]
over = ["storage.storage_type=s3", f"storage.storage_root={bucket}", "storage.s3_client=s3dlio",
        f"storage.endpoint_url={endpoint}"] + ([f"storage.ca_bundle={ca}"] if ca else [])
st = get_storage(load_workload("default", over), check=False)  # s3dlio's process-wide client: this endpoint, bundle
try:
    st.publish(f"s3://{bucket}/s3dlio.bin", b"0123456789")
    buf = bytearray(4)
    st.readinto(f"s3://{bucket}/s3dlio.bin", 2, buf)
    print("read", bytes(buf).decode())
except DataError as exc:
    print("refused", exc)
"""


@pytest.mark.parametrize("bundle", [True, False])
def test_s3dlio_takes_the_ca_bundle_and_verifies_without_it(tls_s3, bundle):
    """s3dlio's client is one per process: each case in its own child."""
    import subprocess
    import sys

    pytest.importorskip("s3dlio", reason="pip install s3dlio")
    r = subprocess.run([sys.executable, "-c", S3DLIO_CHILD, tls_s3.endpoint, tls_s3.bucket, tls_s3.ca if bundle else ""],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    if bundle:
        assert r.stdout.strip() == "read 2345", r.stdout + r.stderr[-2000:]
    else:  # the server's certificate is signed by no CA s3dlio trusts: the PUT fails, naming the object
        assert r.stdout.startswith(f"refused s3://{tls_s3.bucket}/s3dlio.bin: PUT through s3dlio failed"), r.stdout


def test_a_bucket_missing_at_one_endpoint_is_exit_2_naming_it(s3, moto_servers, tmp_path):
    other = moto_servers({})  # a second server: the bucket exists at s3.endpoint only
    over = s3_overrides(s3, tmp_path, "npz", **{"storage.endpoint_urls": f"[{s3.endpoint},{other}]"})
    r = run_iogen("datagen", "default", *over, "-q")
    assert r.returncode == 2 and f"bucket {s3.bucket!r} at {other} does not exist" in r.stderr, r.stderr
    assert "Contents" not in s3.client.list_objects_v2(Bucket=s3.bucket)  # nothing written before the check


class _Answering:
    """A real HTTP server on 127.0.0.1 that answers every request with one status and body (no S3 behind it)."""

    def __init__(self, status, body, headers=()):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.requests = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                outer.requests.append((self.command, self.path))
                self.send_response(status)
                for k, v in (("Content-Type", "application/xml"), *headers):
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


SLOWDOWN = b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>Reduce your rate</Message></Error>"


@pytest.mark.parametrize("bad", ["503_storm_at_my_endpoint", "503_storm_at_another", "not_s3"])
def test_a_storm_or_a_wrong_endpoint_among_several_is_exit_2_before_any_work_naming_it(s3, tmp_path, bad):
    """An endpoint that answers 503 SlowDown to everything (the rank's own, or another it checks), or a web server
    that is not S3 (a 404 page with no x-amz-* header): exit 2 naming it and storage.endpoint_urls, after the check's
    bounded attempts, nothing written."""
    from iogen.storage.s3 import CHECK_ATTEMPTS

    if bad == "not_s3":
        server = _Answering(404, b"<html><body>Not Found</body></html>", (("Server", "nginx"),))
    else:  # SlowDown with S3's headers: a store that throttles everything
        server = _Answering(503, SLOWDOWN, (("x-amz-request-id", "tx1"),))
    with server:
        urls = [server.url, s3.endpoint] if bad == "503_storm_at_my_endpoint" else [s3.endpoint, server.url]
        over = s3_overrides(s3, tmp_path, "npz", **{"storage.endpoint_urls": "[" + ",".join(urls) + "]"})
        r = run_iogen("datagen", "default", *over, "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    if bad == "not_s3":
        assert line == (f"iogen: error: storage.endpoint_urls: {server.url} answered HTTP 404 with no S3 header "
                        "(x-amz-*): it does not look like an S3 endpoint; check the URL (host, port, path), and that bucket "
                        f"{s3.bucket!r} exists there"), line
        assert server.requests == [("HEAD", f"/{s3.bucket}")]  # a 404 is not retried
    else:
        assert line.startswith(f"iogen: error: storage.endpoint_urls: the object store at {server.url} answered HTTP "
                               f"503 to every attempt of the bucket check ({CHECK_ATTEMPTS} attempts)"), line
        assert server.requests == [("HEAD", f"/{s3.bucket}")] * CHECK_ATTEMPTS  # the check's bounded retries
    assert "Contents" not in s3.client.list_objects_v2(Bucket=s3.bucket)  # nothing written anywhere


def test_other_endpoints_are_checked_once_a_run_and_counted_there():
    from iogen.world.communicator import SingleWorld
    from iogen.storage.endpoints import check_once, other_endpoint_checks, requests_by_endpoint

    other_endpoint_checks(reset=True)
    calls = []
    for _ in range(3):  # every get_storage of a run: the other endpoint is HEADed once
        check_once("http://b:2", "bkt1", lambda: calls.append(1) or 1)
    assert calls == [1]
    urls = ("http://a:1", "http://b:2")
    assert requests_by_endpoint(SingleWorld(), urls, 7) == {"http://a:1": 7, "http://b:2": 1}
    check_once("http://b:2", "bkt1", lambda: calls.append(1) or 1)  # a later run in this process checks again
    assert calls == [1, 1] and requests_by_endpoint(SingleWorld(), urls, 0) == {"http://a:1": 0, "http://b:2": 1}
