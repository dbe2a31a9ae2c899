"""bench/decode_images.py, run for real with Pillow: iogen's images pass, a broken one fails and is named."""
import subprocess
import sys
from pathlib import Path

import pytest

from iogen.formats import make_format

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "decode_images.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="runs from a source checkout (bench/)")


def check(folder, *extra):
    return subprocess.run([sys.executable, str(SCRIPT), str(folder), "--decoders", "pillow", *extra],
                          capture_output=True, text=True, timeout=120)


def test_iogen_images_pass_and_a_broken_one_is_named(tmp_path):
    for i, (name, size) in enumerate([("jpeg", 322_957), ("jpeg", 4099), ("png", 70_000)]):
        (tmp_path / f"img_{i}.{name}").write_bytes(bytes(make_format(name).file_image(1, size, 42, i)))
    res = check(tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "| Pillow |" in res.stdout and "| 3 | 3 | 0 | - |" in res.stdout
    broken = bytearray((tmp_path / "img_2.png").read_bytes())
    broken[5000] ^= 1  # inside IDAT's stored blocks: the zlib stream's Adler-32 no longer matches
    (tmp_path / "img_3.png").write_bytes(bytes(broken))
    res = check(tmp_path)
    assert res.returncode == 1 and "| 4 | 3 | 1 |" in res.stdout and "img_3.png:" in res.stdout


def test_nothing_to_check_is_exit_2(tmp_path):
    res = check(tmp_path)
    assert res.returncode == 2 and "no .jpeg/.jpg/.png files" in res.stderr
    assert check(tmp_path, "--decoders", "pillow,bogus").returncode == 2
