"""CRC-32 combination and whole-file CRCs with ranges already known."""
import os
import zlib

from iogen.formats.checksum import crc32_combine, file_crc32, format_crc


def test_combine_matches_zlib_on_concatenation():
    a, b = os.urandom(1000), os.urandom(77777)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b""), 0) == zlib.crc32(a)
    assert crc32_combine(0, zlib.crc32(b), len(b)) == zlib.crc32(b)


def test_file_crc_with_known_ranges(tmp_path):
    data = os.urandom(300_000)
    path = tmp_path / "f"
    path.write_bytes(data)
    whole = zlib.crc32(data)
    assert file_crc32(path) == whole
    known = [(1000, 5000, zlib.crc32(data[1000:6000])), (10, 90, zlib.crc32(data[10:100]))]
    assert file_crc32(path, known) == whole
    # a wrong "known" CRC changes the result: the ranges really are taken as given
    assert file_crc32(path, [(10, 90, 0)]) != whole
    assert format_crc(whole) == f"{whole:08x}"
