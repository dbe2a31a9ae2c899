"""Exit 1 is the gate's alone; a run that fails on an internal error (a bug) exits 3 with one line
that says where its traceback is (the run's log), never a bare traceback."""
import os
import subprocess
import sys

from ..conftest import tiny_overrides

# A real `iogen run` whose engine raises an error iogen did not raise on purpose, as a bug would.
BUGGY_RUN = """
import sys
import iogen.run.engine
def boom(self):
    raise TypeError("unsupported operand (planted bug)")
iogen.run.engine.Engine.run = boom
from iogen.cli.entry import main
main()
"""


def test_an_internal_error_exits_3_naming_the_log_that_holds_its_traceback(tmp_path):
    env = dict(os.environ)
    env.pop("IOGEN_TRACEBACK", None)
    args = ["run", "default", *tiny_overrides(tmp_path, **{"workflow.generate_data": True}), "-q"]
    proc = subprocess.run([sys.executable, "-c", BUGGY_RUN, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("iogen: error:")]
    assert len(lines) == 1 and "TypeError: unsupported operand (planted bug)" in lines[0], proc.stderr
    log = lines[0].rsplit("the traceback is in ", 1)[1]
    assert os.path.isfile(log) and log.endswith("iogen.log"), lines[0]
    with open(log, encoding="utf-8") as fh:
        text = fh.read()
    assert "run incomplete: unsupported operand (planted bug)" in text
    assert "Traceback (most recent call last)" in text and "in boom" in text


def test_without_a_log_the_line_says_how_to_get_the_traceback(tmp_path):
    env = dict(os.environ)
    env.pop("IOGEN_TRACEBACK", None)
    code = "import iogen.cli.commands as c\ndef boom(args): raise KeyError('x')\nc.cmd_workloads = boom\n" \
           "from iogen.cli.entry import main\nmain()"
    proc = subprocess.run([sys.executable, "-c", code, "workloads"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "iogen: error: the run failed on an internal error (a bug, exit 3): KeyError: 'x'; "
        "run again with IOGEN_TRACEBACK=1 to print the traceback"], proc.stderr
    env["IOGEN_TRACEBACK"] = "1"
    proc = subprocess.run([sys.executable, "-c", code, "workloads"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 3 and "Traceback (most recent call last)" in proc.stderr, proc.stderr
