"""The object-store benchmarks against a real S3 server: Ceph RGW on this machine (tests/servers/rgw.py).

Starts RGW (one monitor, one memstore OSD, radosgw on 127.0.0.1) in a scratch folder, runs each
benchmark below with --endpoint on it and RGW's keys in the environment, prints their output as it
comes, and stops RGW by PID at the end (an interrupt included):

- bench/objectstore_clients.py: the same ranged reads through boto3, obstore, s3dlio and
  s3torchconnector, each plain and through iogen's backend (iogen vs its client's plain loop);
- bench/objectstore_reads.py: the native object loader against a boto3 ranged-GET loop;
- bench/objectstore_checkpoint_only.py: checkpoint write and restore against a plain client loop.

RGW and the benchmarks share this machine's cores: on a 2-core machine the server's own CPU is
part of every figure (docs/benchmarks.md says so beside them).

    .venv/bin/python bench/objectstore_rgw.py [--only clients|reads|checkpoint] [-- extra options]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHES = {"clients": "objectstore_clients.py", "reads": "objectstore_reads.py",
           "checkpoint": "objectstore_checkpoint_only.py"}


def _rgw():
    import importlib.util

    path = os.path.join(HERE, "..", "tests", "servers", "rgw.py")
    spec = importlib.util.spec_from_file_location("iogen_bench_rgw", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(BENCHES), action="append", help="run only these (repeatable)")
    ap.add_argument("extra", nargs="*", help="options passed to every benchmark (after --)")
    args = ap.parse_args(argv)
    rgw = _rgw()
    folder = tempfile.mkdtemp(prefix="iogen-rgw-bench-")
    try:
        info = rgw.start(folder)
    except rgw.Unavailable as exc:
        print(f"RGW cannot run here: {exc}", file=sys.stderr)
        return 2
    env = {**os.environ, "AWS_ACCESS_KEY_ID": info["access_key"], "AWS_SECRET_ACCESS_KEY": info["secret_key"],
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": info["endpoint"]}
    env.pop("AWS_PROFILE", None)
    rc = 0
    try:
        print(f"server: Ceph RGW at {info['endpoint']} (memstore OSD, this machine; folder {folder})", flush=True)
        for name in args.only or list(BENCHES):
            print(f"\n## {name}: {BENCHES[name]}", flush=True)
            r = subprocess.run([sys.executable, os.path.join(HERE, BENCHES[name]), "--endpoint", info["endpoint"],
                                *args.extra], env=env)
            rc = rc or r.returncode
    finally:
        rgw.stop(folder)
    return rc


if __name__ == "__main__":
    sys.exit(main())
