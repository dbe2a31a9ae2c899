"""CRC combination and whole-file CRC-32C with ranges already known."""
import os
import zlib

from iogen.common.checksum import CRC32_POLY, crc32c, crc_combine, file_crc32c, format_crc


def test_crc32c_known_vector():
    assert crc32c(b"123456789") == 0xE3069283


def test_combine_matches_concatenation_for_both_polynomials():
    a, b = os.urandom(1000), os.urandom(77777)
    assert crc_combine(crc32c(a), crc32c(b), len(b)) == crc32c(a + b)
    assert crc_combine(zlib.crc32(a), zlib.crc32(b), len(b), CRC32_POLY) == zlib.crc32(a + b)
    assert crc_combine(crc32c(a), crc32c(b""), 0) == crc32c(a)
    assert crc_combine(0, crc32c(b), len(b)) == crc32c(b)


def test_file_crc_with_known_ranges(tmp_path):
    data = os.urandom(300_000)
    path = tmp_path / "f"
    path.write_bytes(data)
    whole = crc32c(data)
    assert file_crc32c(path) == whole
    known = [(1000, 5000, crc32c(data[1000:6000])), (10, 90, crc32c(data[10:100]))]
    assert file_crc32c(path, known) == whole
    # a wrong "known" CRC changes the result: the ranges really are taken as given
    assert file_crc32c(path, [(10, 90, 0)]) != whole
    assert format_crc(whole) == f"{whole:08x}"
