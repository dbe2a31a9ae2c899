"""A real S3 server for the tests and benchmarks: Ceph's RADOS Gateway on one monitor and one
memstore OSD, in a scratch folder, on 127.0.0.1. Started and stopped by PID, never by name.

    python tests/servers/rgw.py start DIR     # prints one JSON line: endpoint, access_key, secret_key
    python tests/servers/rgw.py stop DIR
    python tests/servers/rgw.py install       # the packages only, when missing and installable (`make test`)

`start` needs Debian's ceph-mon, ceph-osd, radosgw and ceph-common (`install()` installs them
with apt-get when they are missing and this is root on a machine with apt); it takes about 30 s.
Everything lives under DIR (configuration, monitor store, logs, PID files); `stop` ends each
daemon by the PID its file names and waits for it. Nothing else on the machine is touched.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

PACKAGES = ("ceph-mon", "ceph-osd", "radosgw", "ceph-common")
BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "monmaptool", "ceph", "radosgw-admin")
DAEMONS = ("radosgw", "ceph-osd", "ceph-mon")  # stop order
ACCESS_KEY = "IOGENRGWACCESSKEY000"
SECRET_KEY = "iogen-rgw-secret-key-0000000000000000000"
START_TIMEOUT_S = 180
_CHILDREN: dict[int, subprocess.Popen] = {}  # the daemons this process started: stop() reaps them (no zombie)


class Unavailable(RuntimeError):
    """RGW cannot run here; the message says why (the tests that need it skip with it)."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def install() -> None:
    """apt-get install the packages when they are missing and this is root with apt-get."""
    if not missing_binaries():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise Unavailable(f"{', '.join(missing_binaries())} missing and not installable here (needs root and "
                          f"apt-get: apt-get install --no-install-recommends {' '.join(PACKAGES)})")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        if res.returncode != 0:
            raise Unavailable(f"{' '.join(cmd)} failed: {(res.stderr or res.stdout).strip()[-300:]}")
    if missing_binaries():
        raise Unavailable(f"still missing after apt-get: {', '.join(missing_binaries())}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mon_addrs(mon_port: int) -> str:
    """The monitor's addresses, msgr2 and legacy (daemons connect to it by msgr2)."""
    return f"[v2:127.0.0.1:{mon_port},v1:127.0.0.1:{mon_port + 1}]"


def _free_port_pair() -> int:
    """A free port whose successor is free too (the monitor's msgr2 and legacy ports)."""
    for _ in range(100):
        port = _free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    raise Unavailable("no two adjacent free ports on 127.0.0.1")


def _conf(d: str, mon_port: int, rgw_port: int, fsid: str) -> str:
    return f"""[global]
fsid = {fsid}
mon host = {_mon_addrs(mon_port)}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
ms bind ipv6 = false
auth cluster required = none
auth service required = none
auth client required = none
auth supported = none
ms mon client mode = crc
ms client mode = crc
ms service mode = crc
ms cluster mode = crc
ms mon service mode = crc
ms mon cluster mode = crc
auth allow insecure global id reclaim = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd objectstore = memstore
memstore device bytes = {8 << 30}
run dir = {d}/run
pid file = {d}/run/$name.pid
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
mon data = {d}/mon/$name
osd data = {d}/osd/$name
keyring = {d}/keyring
debug ms = 0
[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw data = {d}/rgw
rgw dns name = localhost
rgw thread pool size = 64
"""


def _run(d, *args, timeout=60, check=True):
    res = subprocess.run([*args, "-c", f"{d}/ceph.conf"], capture_output=True, text=True, timeout=timeout,
                         stdin=subprocess.DEVNULL)
    if check and res.returncode != 0:
        raise Unavailable(f"{' '.join(args)}: {(res.stderr or res.stdout).strip()[-400:]}")
    return res


def _daemon(d, *args) -> None:
    """Start a daemon in the foreground (-f) as a child in its own session, its output to a file;
    its PID file (`pid file` in ceph.conf) names it for stop(). Ceph's own daemonising waits for the
    daemon's whole start-up (an OSD waits for a manager that never comes here)."""
    out = open(f"{d}/log/{args[0]}.out", "ab")
    try:
        proc = subprocess.Popen([*args, "-f", "-c", f"{d}/ceph.conf"], stdin=subprocess.DEVNULL, stdout=out,
                                stderr=out, start_new_session=True)
    finally:
        out.close()
    _CHILDREN[proc.pid] = proc
    with open(f"{d}/run/{args[0]}.started-pid", "w") as fh:  # ours: stop() ends it by this PID
        fh.write(str(proc.pid))
    time.sleep(0.5)
    if proc.poll() is not None:
        with open(f"{d}/log/{args[0]}.out", "rb") as fh:
            raise Unavailable(f"{' '.join(args)} exited {proc.returncode}: "
                              f"{fh.read()[-400:].decode(errors='replace')}")


def start(d: str) -> dict:
    """Start mon, osd and radosgw under d; return {endpoint, access_key, secret_key}."""
    install()
    d = os.path.abspath(d)
    for sub in ("run", "log", "mon/mon.a", "osd/osd.0", "rgw"):
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    mon_port, rgw_port, fsid = _free_port_pair(), _free_port(), str(uuid.uuid4())
    with open(f"{d}/ceph.conf", "w") as fh:
        fh.write(_conf(d, mon_port, rgw_port, fsid))
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        subprocess.run(["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", "a", _mon_addrs(mon_port),
                        f"{d}/monmap"], check=True, capture_output=True, timeout=30)
        _run(d, "ceph-authtool", "--create-keyring", f"{d}/keyring", "--gen-key", "-n", "mon.",
             "--cap", "mon", "allow *")
        _run(d, "ceph-mon", "--mkfs", "-i", "a", "--monmap", f"{d}/monmap")
        _daemon(d, "ceph-mon", "-i", "a")
        _wait(d, lambda: _run(d, "ceph", "-s", "--connect-timeout", "5", check=False).returncode == 0,
              deadline, "the monitor")
        osd_id = _run(d, "ceph", "osd", "create").stdout.strip()
        if osd_id != "0":
            raise Unavailable(f"ceph osd create gave id {osd_id!r}, expected 0")
        _run(d, "ceph-osd", "-i", "0", "--mkfs")
        _run(d, "ceph", "osd", "crush", "add-bucket", "node0", "host")
        _run(d, "ceph", "osd", "crush", "move", "node0", "root=default")
        _run(d, "ceph", "osd", "crush", "add", "osd.0", "1.0", "host=node0")
        _daemon(d, "ceph-osd", "-i", "0")
        _wait(d, lambda: '"num_up_osds":1' in _run(d, "ceph", "osd", "stat", "-f", "json", check=False).stdout
              .replace(" ", ""), deadline, "the OSD")
        _daemon(d, "radosgw", "-n", "client.rgw")
        endpoint = f"http://127.0.0.1:{rgw_port}"
        _wait(d, lambda: _answers(rgw_port), deadline, "radosgw")
        _wait(d, lambda: _run(d, "radosgw-admin", "user", "create", "--uid=iogen", "--display-name=iogen",
                              f"--access-key={ACCESS_KEY}", f"--secret-key={SECRET_KEY}", check=False,
                              timeout=60).returncode == 0, deadline, "the user")
    except BaseException:
        stop(d)
        raise
    info = {"endpoint": endpoint, "access_key": ACCESS_KEY, "secret_key": SECRET_KEY, "dir": d}
    with open(f"{d}/endpoint.json", "w") as fh:
        json.dump(info, fh)
    return info


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
            return s.recv(12).startswith(b"HTTP/1.")
    except OSError:
        return False


def _wait(d, ready, deadline, what) -> None:
    while not ready():
        if time.monotonic() > deadline:
            raise Unavailable(f"{what} did not come up within {START_TIMEOUT_S} s (logs in {d}/log)")
        time.sleep(0.5)


def stop(d: str) -> None:
    """End every daemon started under d by the PID start() recorded; wait for each to exit."""
    d = os.path.abspath(d)
    for name in DAEMONS:
        path = f"{d}/run/{name}.started-pid"
        try:
            with open(path) as fh:
                pid = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if not _is_ours(pid, d):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.1)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if pid in _CHILDREN:  # started by this process: reap it
            _CHILDREN.pop(pid).wait()


def _is_ours(pid: int, d: str) -> bool:
    """The PID's command line names this folder's configuration (a reused PID is left alone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return f"{d}/ceph.conf".encode() in fh.read()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:  # `make test`: the packages, before the suite (the tests skip without them)
        try:
            install()
        except (Unavailable, OSError, subprocess.SubprocessError) as exc:
            print(f"rgw: the RGW tests will be skipped: {exc}", file=sys.stderr)
        sys.exit(0)
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit(__doc__)
    try:
        if sys.argv[1] == "start":
            print(json.dumps(start(sys.argv[2])))
        else:
            stop(sys.argv[2])
    except Unavailable as exc:
        sys.exit(f"rgw: {exc}")
