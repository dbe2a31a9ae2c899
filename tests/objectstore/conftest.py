"""What is left of the object-storage folder: test_datagen_verify.py, which stays here while datagen's
tests change (it joins tests/datagen next).

The object tests of every other stage live in that stage's folder; their servers and helpers (the `s3`
fixture, s3_auth, throttling_proxy, tls_s3_server, s3_overrides, key_of) are tests/conftest.py's. This
folder's tests skip as a whole without boto3 and moto's server, as before.
"""
import pytest

pytest.importorskip("boto3", reason="pip install 'iogen[s3]' (boto3) for the object-storage tests")
pytest.importorskip("moto.server", reason="pip install 'moto[server]' for the object-storage tests")
