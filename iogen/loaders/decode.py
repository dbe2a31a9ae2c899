"""Decode mode (`reader.decode_images`): each image sample decoded with Pillow where it was read.

By default an image sample is its file's bytes, as MLPerf Storage v3.0's image reader keeps them.
With `reader.decode_images: true` the thread or worker that read a batch then decodes every image
of it completely with Pillow (`Image.open(...).load()`) and takes its pixels as a NumPy array, as
DLIO 2.0's image reader does, and drops them, as DLIO does: the batch handed on is still the files'
bytes. The array is Pillow's own pixel memory, exported without a copy through its Arrow interface
(`pixel_array`); DLIO's `np.asarray(image)` packs and copies every pixel (`Image.tobytes`), about
1.7 ms of the ~4.6 ms an 824 x 616 image (JPEG layout 1) cost here. Where the export is refused (an image in
several memory blocks), `np.asarray` is the fallback.

What decoding costs the host is measured apart from I/O: the thread CPU time
(`time.thread_time_ns`) around each image's decode, summed per loader (`DecodeCost`); a DataLoader
worker's sum rides back with each batch. Pillow releases the GIL while it decodes, so reading
threads decode in parallel.

Before decoding, each file's whole structure is checked (the format's walk: JPEG segments and the
scan's markers, PNG chunks and every chunk's CRC-32), timed apart. A file that fails either is
exit 2 naming it, with the offset of the fault when the walk finds it.
"""
from __future__ import annotations

import io
import time

import numpy as np

from ..errors import DataError

class DecodeCost:
    """Images decoded, the thread CPU time (ns) of their structure checks and of their decoding, and
    the decoded pixels' bytes, summed."""

    __slots__ = ("images", "check_ns", "cpu_ns", "pixel_bytes")
    FIELDS = 4

    def __init__(self, images: int = 0, check_ns: int = 0, cpu_ns: int = 0, pixel_bytes: int = 0):
        self.images, self.check_ns, self.cpu_ns, self.pixel_bytes = (int(images), int(check_ns), int(cpu_ns),
                                                                     int(pixel_bytes))

    def add(self, other) -> None:
        """Add another cost (a DecodeCost or an (images, check_ns, cpu_ns, pixel_bytes) tuple)."""
        images, check_ns, cpu_ns, pixel_bytes = other.as_tuple() if isinstance(other, DecodeCost) else other
        self.images += int(images)
        self.check_ns += int(check_ns)
        self.cpu_ns += int(cpu_ns)
        self.pixel_bytes += int(pixel_bytes)

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.images, self.check_ns, self.cpu_ns, self.pixel_bytes


class ImageDecoder:
    """Decodes image payloads with Pillow, timing each decode in thread CPU time."""

    def __init__(self, fmt):
        from PIL import Image, ImageFile  # reader.decode_images needs Pillow (iogen.cli.deps)

        self.fmt = fmt
        self._open = Image.open
        # a truncated file is an error, never a partly grey image (Pillow's default, said here)
        ImageFile.LOAD_TRUNCATED_IMAGES = False
        self._errors = (OSError, SyntaxError, ValueError, Image.DecompressionBombError, EOFError)
        self._walk = getattr(fmt, "walk", None)

    def decode(self, buf, starts, lengths, path_of) -> tuple[int, int, int, int]:
        """Check and decode the payloads buf[starts[i]:starts[i] + lengths[i]]; return
        (images, check ns, decode ns, pixel bytes), both times thread CPU time.

        Each file's whole structure is checked first (Format.walk: JPEG segments and the scan's
        markers, PNG chunks and every chunk's CRC-32, which Pillow does not check for IDAT), then
        Pillow decodes it. path_of(i): the file of payload i, for the error a corrupt one raises
        (DataError, exit 2).
        """
        mv = memoryview(buf).cast("B")
        clock, open_, walk = time.thread_time_ns, self._open, self._walk
        check = cpu = pixels = n = 0
        for i, (s, ln) in enumerate(zip(np.asarray(starts).tolist(), np.asarray(lengths).tolist())):
            data = mv[s:s + ln]
            t0 = clock()
            if walk is not None:
                walk(data, path_of(i))  # DataError naming the file and the offset of the fault
            t1 = clock()
            try:
                with open_(io.BytesIO(data)) as im:
                    im.load()
                    arr = pixel_array(im)
                    size = im.size[0] * im.size[1] * len(im.getbands())
            except self._errors as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise DataError(path_of(i), f"image does not decode: Pillow: {reason}") from None
            t2 = clock()
            check += t1 - t0
            cpu += t2 - t1
            pixels += size
            n += 1
            del arr
        return n, check, cpu, pixels


def pixel_array(im) -> np.ndarray:
    """A decoded (loaded) Pillow image's pixels as a NumPy array: its own memory, without a copy, through
    the Arrow C data interface (Pillow >= 11.2: one value a pixel, 4 bytes for 3-band modes, so the
    array holds height x width x 4 bytes with the pad byte); np.asarray (a packed copy) where the export
    is refused (an image in several memory blocks, or an older Pillow)."""
    try:
        import pyarrow  # a dependency already (Parquet); loaded once per process
    except ImportError:
        return np.asarray(im)
    try:
        values = pyarrow.array(im)
        values = values.values if isinstance(values, pyarrow.FixedSizeListArray) else values
        return values.to_numpy(zero_copy_only=True)
    except (pyarrow.ArrowException, AttributeError, ValueError, TypeError):  # the export refused
        return np.asarray(im)


def decode_block(world, train_cost: DecodeCost | None, eval_cost: DecodeCost | None = None) -> dict | None:
    """summary.json's `iogen.decode`: every rank's decode cost summed, train phases at the top and eval
    phases under `eval` (collective: every rank calls it; None when decode mode is off)."""
    k = DecodeCost.FIELDS
    none = (0,) * k
    mine = np.array([*(train_cost.as_tuple() if train_cost is not None else none),
                     *(eval_cost.as_tuple() if eval_cost is not None else none),
                     1 if train_cost is not None or eval_cost is not None else 0], np.int64)
    summed = [int(v) for v in world.allreduce_array(mine, "sum")]
    if not summed[2 * k]:
        return None
    from PIL import __version__ as pillow

    block = {"decoder": f"Pillow {pillow}",
             "where": "in the reading threads (native loader) or DataLoader workers (pytorch loader), after the reads",
             "scope": "every step of every rank (the metrics window's excluded steps included); thread CPU time of "
                      "the decodes only, not of the reads",
             **_figures(*summed[:k])}
    if summed[k]:
        block["eval"] = _figures(*summed[k:2 * k])
    return block


def _figures(images: int, check_ns: int, cpu_ns: int, pixel_bytes: int) -> dict:
    return {"images": images,
            "decode_cpu_s": cpu_ns / 1e9,  # Pillow's open and load, and the pixels as an array (pixel_array)
            "decode_cpu_ms_per_image": cpu_ns / 1e6 / images if images else None,
            "check_cpu_s": check_ns / 1e9,  # iogen's structure walk before each decode
            "check_cpu_ms_per_image": check_ns / 1e6 / images if images else None,
            "decoded_pixel_bytes": pixel_bytes}
