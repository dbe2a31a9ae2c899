"""Every image file of a folder through every decoder this Python has: Pillow, torchvision, TensorFlow.

issue 23 asks that every generated JPEG and PNG be an image that Pillow, torchvision and
`tf.io.decode_image` open and decode completely. The test suite checks Pillow and TensorFlow
(tests/formats/test_images.py, tests/formats/test_tf_interop.py); torchvision is not in the test set-up
(its PyPI wheels for x86-64 come with a CUDA build of torch, not the CPU build the suite pins), so it is
checked here, with any Python that has it, on files `iogen datagen` wrote:

    .venv/bin/iogen datagen retinanet --accelerator b200 dataset.num_files_train=2000 dataset.data_folder=DIR
    OTHER_PYTHON bench/decode_images.py DIR/train

This script imports nothing of iogen. A file passes a decoder when the decoder returns its pixels
without an error or a warning (libjpeg's "Corrupt JPEG data" warnings included: they go to the
process's stderr, which is read back here; a notice that an API is deprecated is not about the file), with 3 channels, the size Pillow reads from the header, and
the spread of noise (a standard deviation above 10: a decoder that gave up part way fills grey). Each
decoder runs in a child process of its own, so one that crashes on a file fails that file and the check
goes on.
Prints one Markdown row a decoder; exit 1 when any file failed any decoder, 2 when there is nothing to
check.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

SUFFIXES = (".jpeg", ".jpg", ".png")


def _pillow():
    import io

    import numpy as np
    import PIL
    from PIL import Image

    def decode(data):
        with Image.open(io.BytesIO(data)) as im:
            im.load()  # every pixel: a broken scan or zlib stream raises here
            return np.asarray(im.convert("RGB"))

    return PIL.__version__, decode


def _torchvision():
    import torch
    import torchvision
    from torchvision.io import ImageReadMode, decode_image

    def decode(data):
        return decode_image(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB) \
            .permute(1, 2, 0).numpy()

    return f"{torchvision.__version__} (torch {torch.__version__})", decode


def _tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    def decode(data):
        return tf.io.decode_image(data, channels=3).numpy()

    return tf.__version__, decode


# name: (the module it needs, what imports it and returns (version, decode(bytes) -> H x W x 3 array))
DECODERS = {"Pillow": ("PIL", _pillow), "torchvision.io.decode_image": ("torchvision", _torchvision),
            "tf.io.decode_image": ("tensorflow", _tensorflow)}
SHORT = {"pillow": "Pillow", "torchvision": "torchvision.io.decode_image", "tensorflow": "tf.io.decode_image"}


def _available() -> list[str]:
    """The decoders whose module this Python has (found, not imported: each child imports its own)."""
    from importlib.util import find_spec

    return [name for name, (module, _) in DECODERS.items() if find_spec(module) is not None]


class _Stderr:
    """What C libraries write to file descriptor 2 while the block runs (libjpeg's warnings)."""

    def __enter__(self):
        sys.stderr.flush()
        self.tmp = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.tmp.seek(0)
        self.text = self.tmp.read().decode("utf-8", "replace")
        self.tmp.close()


_NOISE = ("WARNING: All log messages before absl::InitializeLog()",)  # TensorFlow's start-up notices


def _stderr_problem(text: str) -> str:
    """The decoder's own warning in what fd 2 got, without TensorFlow's logging notices (I0000/W0000 lines)."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(_NOISE)
             and not (len(ln) > 5 and ln[0] in "IW" and ln[1:5].isdigit())]
    return " ".join(" ".join(lines).split())[:200]


def _header_shape(data: bytes):
    """(height, width, 3) as the file's header says (Pillow reads it without decoding), or None without Pillow."""
    try:
        import io

        from PIL import Image
    except ImportError:
        return None
    try:
        with Image.open(io.BytesIO(data)) as im:
            return im.size[1], im.size[0], 3
    except Exception:  # noqa: BLE001 - no header to compare with: the decoder's own result is judged alone
        return None


def check_file(path, decode) -> str:
    """Why one file fails one decoder ("" when it passes)."""
    with open(path, "rb") as f:
        data = f.read()
    problem = ""
    with _Stderr() as err, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            pixels = decode(data)
        except Exception as exc:  # noqa: BLE001 - any decoder error is this file's failure
            problem = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            pixels = None
    caught = [w for w in caught if "deprecated" not in str(w.message)]  # torchvision 0.29's notice of its API
    warned = str(caught[0].message) if caught else _stderr_problem(err.text)
    if not problem and warned:
        problem = "warned: " + " ".join(warned.split())[:200]
    if not problem:
        shape, expected = tuple(pixels.shape), _header_shape(data)
        if len(shape) != 3 or shape[2] != 3 or expected is not None and shape != expected:
            problem = f"pixels {shape}, the header says {expected}"
        elif float(pixels.std()) <= 10:
            problem = f"pixels' standard deviation {float(pixels.std()):.1f}: not the file's noise"
    return problem


def _child(name: str, paths: list[str], start: int) -> int:
    """Decode paths[start:] with one decoder: its version first ("version v"), then a line before ("begin i") and
    after ("done i problem") each file."""
    version, decode = DECODERS[name][1]()
    print(f"version {version}", flush=True)
    for i in range(start, len(paths)):
        print(f"begin {i}", flush=True)
        print(f"done {i} {check_file(paths[i], decode)}", flush=True)
    return 0


def check(paths, decoders, list_file: str) -> list[tuple[str, str, int, int, str]]:
    """(decoder, version, files, failures, first failure) for each decoder over every path, each decoder in a
    child process of its own: a decoder that crashes its process on a file (torchvision 0.29.1 does on a PNG
    whose zlib check is wrong) fails that file, and the next child goes on from the file after it."""
    import subprocess

    rows = []
    for name in decoders:
        failed, first, start, version = 0, "", 0, "?"
        while start < len(paths):
            child = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name, "--list", list_file,
                                    "--start", str(start), "x"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   text=True)
            begun = None
            for line in child.stdout.splitlines():
                word, i, *rest = line.split(" ", 2)
                if word == "version":
                    version = line.split(" ", 1)[1]
                elif word == "begin":
                    begun = int(i)
                elif word == "done":
                    begun, start = None, int(i) + 1
                    if rest and rest[0]:
                        failed += 1
                        first = first or f"{paths[int(i)]}: {rest[0]}"
            if begun is not None or child.returncode != 0:  # the process died on file `begun`
                where = begun if begun is not None else start
                failed += 1
                first = first or f"{paths[where]}: the decoder ended its process (exit {child.returncode})"
                start = where + 1
        rows.append((name, version, len(paths), failed, first))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="a folder of .jpeg/.jpg/.png files (not searched recursively)")
    p.add_argument("--limit", type=int, default=0, help="check only the first N files by name (0: all)")
    p.add_argument("--decoders", default="", help="comma-separated: pillow,torchvision,tensorflow (default: every "
                                                   "one this Python has)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--list", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        with open(args.list) as f:
            return _child(args.child, f.read().splitlines(), args.start)
    try:
        names = sorted(n for n in os.listdir(args.folder) if n.lower().endswith(SUFFIXES))
    except OSError as exc:
        print(f"decode_images: {args.folder}: {exc.strerror}", file=sys.stderr)
        return 2
    if args.limit > 0:
        names = names[:args.limit]
    if args.decoders:
        unknown = [d for d in args.decoders.split(",") if d not in SHORT]
        if unknown:
            p.error(f"--decoders: {', '.join(unknown)}: choose from {', '.join(SHORT)}")
        decoders = [SHORT[d] for d in args.decoders.split(",") if SHORT[d] in _available()]
    else:
        decoders = _available()
    if not names or not decoders:
        print(f"decode_images: {args.folder}: " + ("no .jpeg/.jpg/.png files" if not names else
                                                    "no decoder importable (Pillow, torchvision, tensorflow)"),
              file=sys.stderr)
        return 2
    paths = [os.path.join(args.folder, n) for n in names]
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as listing:
        listing.write("\n".join(paths))
        listing.flush()
        rows = check(paths, decoders, listing.name)
    print(f"{len(names)} files of {args.folder}, python {sys.version.split()[0]}\n")
    print("| decoder | version | files | decoded | failed | first failure |")
    print("|---|---|---|---|---|---|")
    for name, version, files, failed, first in rows:
        print(f"| {name} | {version} | {files} | {files - failed} | {failed} | {first or '-'} |")
    return 1 if any(r[3] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
