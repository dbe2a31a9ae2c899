"""A small hand-written codec for tf.train.Example, so TFRecord files need no TensorFlow.

The messages (tensorflow/core/example/example.proto, feature.proto):

    Example  { Features features = 1; }
    Features { map<string, Feature> feature = 1; }      // entries: {string key = 1; Feature value = 2;}
    Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2; Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }  FloatList { repeated float value = 1 [packed]; }
    Int64List { repeated int64 value = 1 [packed]; }

Protobuf wire format: each field is a varint key (field_number << 3 | wire_type), then a varint
(type 0), 8 bytes (1), a varint length and that many bytes (2), or 4 bytes (5).

iogen writes DLIO's features, `size` (int64) first and `image` (bytes) last, so a record's
image is the tail of its data: `image_example_prefix` gives everything before the image bytes
and the writer streams the image after it.
"""
from __future__ import annotations

import struct

_WIRE_VARINT, _WIRE_64, _WIRE_LEN, _WIRE_32 = 0, 1, 2, 5


class ExampleDecodeError(ValueError):
    """The bytes are not a well-formed tf.train.Example."""


def varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int (negative int64: two's complement, 10 bytes)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _len_field(field: int, payload_len: int) -> bytes:
    """Key and length of a length-delimited field (its payload follows)."""
    return varint(field << 3 | _WIRE_LEN) + varint(payload_len)


def _field(field: int, payload: bytes) -> bytes:
    return _len_field(field, len(payload)) + payload


def _feature(value) -> bytes:
    """Serialized Feature for bytes, a list of ints or a list of floats."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _field(1, _field(1, bytes(value)))
    if isinstance(value, str):
        return _field(1, _field(1, value.encode()))
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if values and all(isinstance(v, (bytes, bytearray)) for v in values):
        return _field(1, b"".join(_field(1, bytes(v)) for v in values))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _field(3, _field(1, b"".join(varint(v) for v in values)))
    return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))


def encode_example(features: dict) -> bytes:
    """Serialize {name: bytes | int | [ints] | [floats] | [bytes]} as a tf.train.Example."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, _feature(value)))
                       for name, value in features.items())
    return _field(1, entries)


def image_example_prefix(image_bytes: int, size_value: int) -> bytes:
    """The Example bytes that precede an `image` of image_bytes bytes (features size, then image)."""
    size_entry = _field(1, _field(1, b"size") + _field(2, _feature([int(size_value)])))
    bytes_list_len = len(_len_field(1, image_bytes)) + image_bytes
    feature_len = len(_len_field(1, bytes_list_len)) + bytes_list_len
    key = _field(1, b"image")
    entry_len = len(key) + len(_len_field(2, feature_len)) + feature_len
    features_len = len(size_entry) + len(_len_field(1, entry_len)) + entry_len
    return b"".join((_len_field(1, features_len), size_entry, _len_field(1, entry_len), key,
                     _len_field(2, feature_len), _len_field(1, bytes_list_len), _len_field(1, image_bytes)))


# -- decoding -------------------------------------------------------------------------------

def _read_varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise ExampleDecodeError("varint runs past the end of its message")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ExampleDecodeError("varint longer than 10 bytes")


def _fields(buf, pos: int, end: int):
    """Yield (field number, wire type, value or (start, stop) of a length-delimited payload)."""
    while pos < end:
        key, pos = _read_varint(buf, pos, end)
        field, wire = key >> 3, key & 7
        if wire == _WIRE_VARINT:
            value, pos = _read_varint(buf, pos, end)
        elif wire == _WIRE_LEN:
            n, pos = _read_varint(buf, pos, end)
            if pos + n > end:
                raise ExampleDecodeError(f"field {field} announces {n} bytes, {end - pos} remain")
            value = (pos, pos + n)
            pos += n
        elif wire == _WIRE_64:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == _WIRE_32:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ExampleDecodeError(f"unsupported wire type {wire} in field {field}")
        if pos > end:
            raise ExampleDecodeError("field runs past the end of its message")
        yield field, wire, value


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _decode_feature(buf, start: int, end: int):
    for kind, wire, value in _fields(buf, start, end):
        if wire != _WIRE_LEN:
            continue
        s, e = value
        if kind == 1:
            return [bytes(buf[v[0]:v[1]]) for f, w, v in _fields(buf, s, e) if f == 1 and w == _WIRE_LEN]
        if kind == 2:
            out = []
            for f, w, v in _fields(buf, s, e):
                if f == 1 and w == _WIRE_LEN:
                    if (v[1] - v[0]) % 4:
                        raise ExampleDecodeError(f"packed floats of {v[1] - v[0]} bytes, not a multiple of 4")
                    out += struct.unpack(f"<{(v[1] - v[0]) // 4}f", bytes(buf[v[0]:v[1]]))
                elif f == 1 and w == _WIRE_32:
                    out.append(struct.unpack("<f", bytes(v))[0])
            return out
        if kind == 3:
            out = []
            for f, w, v in _fields(buf, s, e):
                if f == 1 and w == _WIRE_LEN:
                    p = v[0]
                    while p < v[1]:
                        x, p = _read_varint(buf, p, v[1])
                        out.append(_signed64(x))
                elif f == 1 and w == _WIRE_VARINT:
                    out.append(_signed64(v))
            return out
    return []


def decode_example(data) -> dict:
    """Parse a serialized tf.train.Example into {name: [bytes] | [ints] | [floats]}."""
    buf = memoryview(data).cast("B")
    out = {}
    for field, wire, value in _fields(buf, 0, len(buf)):
        if field != 1 or wire != _WIRE_LEN:
            continue
        for f, w, entry in _fields(buf, *value):
            if f != 1 or w != _WIRE_LEN:
                continue
            name, feature = None, None
            for kf, kw, kv in _fields(buf, *entry):
                if kf == 1 and kw == _WIRE_LEN:
                    name = _feature_name(buf, kv)
                elif kf == 2 and kw == _WIRE_LEN:
                    feature = _decode_feature(buf, *kv)
            if name is not None:
                out[name] = feature if feature is not None else []
    return out


def _feature_name(buf, span) -> str:
    """A feature name (protobuf strings are UTF-8; anything else is a malformed Example)."""
    raw = bytes(buf[span[0]:span[1]])
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise ExampleDecodeError(f"feature name {raw[:32]!r} is not UTF-8") from None


def image_span(data, name: bytes = b"image") -> tuple[int, int]:
    """(start, stop) of the first value of bytes feature `name` in a serialized tf.train.Example.

    The whole message is walked, as tf.io.parse_single_example does: bytes after the image
    that do not parse make the record malformed too.
    """
    buf = memoryview(data).cast("B")
    found = None
    for field, _, value in _fields(buf, 0, len(buf)):
        if field != 1 or not isinstance(value, tuple):  # Example.features
            continue
        for f, _, entry in _fields(buf, *value):  # Features.feature map entries
            if f != 1 or not isinstance(entry, tuple):
                continue
            key, feature = None, None
            for kf, _, kv in _fields(buf, *entry):
                if kf == 1 and isinstance(kv, tuple):
                    key = bytes(buf[kv[0]:kv[1]])
                elif kf == 2 and isinstance(kv, tuple):
                    feature = kv
            if key != name or feature is None or found is not None:
                continue
            for kind, _, lst in _fields(buf, *feature):  # Feature: 1 = bytes_list
                if kind == 1 and isinstance(lst, tuple):
                    for vf, _, v in _fields(buf, *lst):
                        if vf == 1 and isinstance(v, tuple) and found is None:
                            found = v
    if found is None:
        raise ExampleDecodeError(f"no {name.decode()!r} bytes feature")
    return found
