#!/usr/bin/env python3
"""Writes the seed corpus for checkpoint_fuzz: small valid safetensors files
and one broken file per loader rule, so the fuzzer starts next to every
branch. Rerun after changing it; the outputs are committed.

    python3 fuzz/make_corpus.py    # writes fuzz/corpus/checkpoint/*
"""
import json
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "checkpoint")


def header(obj, pad=True):
    text = json.dumps(obj, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    return text


def file(head, data=b"", length=None):
    return struct.pack("<Q", len(head) if length is None else length) + head + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "BOOL": 1}


def valid_all_dtypes():
    head, data, at = {"__metadata__": {"format": "pt", "tessel.aliases": '{"tied":"f32.2"}'}}, b"", 0
    for i, (code, size) in enumerate(SIZES.items()):
        for j, shape in enumerate([[], [0], [2, 3]]):
            n = size
            for d in shape:
                n *= d
            head[f"{code.lower()}.{j}"] = entry(code, shape, at, at + n)
            data += bytes((i * 7 + k) % 256 if code != "BOOL" else k % 2 for k in range(n))
            at += n
    return file(header(head), data)


def seeds():
    w = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    b = struct.pack("<3f", 0.5, -1, 0)
    basic = {"__metadata__": {"format": "pt"}, "0.weight": entry("F32", [2, 3], 0, 24),
             "0.bias": entry("F32", [3], 24, 36)}
    yield "valid_basic", file(header(basic), w + b)
    yield "valid_unpadded", file(header(basic, pad=False), w + b)
    yield "valid_all_dtypes", valid_all_dtypes()
    yield "valid_empty", file(header({}))
    yield "valid_metadata_only", file(header({"__metadata__": {"a": "b", "c": ""}}))
    one = lambda e, data=b"": file(header({"t": e}), data)
    yield "bad_size", one(entry("F32", [2, 3], 0, 12), bytes(12))
    yield "bad_dtype", one(entry("F8_E4M3", [2], 0, 2), bytes(2))
    yield "bad_shape_negative", one({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}, bytes(4))
    yield "bad_shape_rank17", one(entry("BOOL", [1] * 17, 0, 1), bytes(1))
    yield "bad_overflow", one(entry("F64", [2**62, 2**62], 0, 0))
    yield "bad_offsets", one({"dtype": "F32", "shape": [1], "data_offsets": [4, 0, 1]}, bytes(4))
    yield "bad_entry_fields", one({"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "x": 1}, bytes(4))
    yield "bad_gap", file(header({"a": entry("I32", [1], 0, 4), "b": entry("I32", [1], 8, 12)}), bytes(12))
    yield "bad_overlap", file(header({"a": entry("I32", [2], 0, 8), "b": entry("I32", [1], 4, 8)}), bytes(8))
    yield "bad_file_end", one(entry("I64", [1], 0, 8), bytes(9))
    yield "bad_metadata", file(header({"__metadata__": {"epoch": 3}}))
    yield "bad_duplicate", file(b'{"a":' + json.dumps(entry("BOOL", [1], 0, 1)).encode() + b',"a":'
                                + json.dumps(entry("BOOL", [1], 0, 1)).encode() + b"}", bytes(1))
    yield "bad_utf8", file(b'{"\xc3\x28":{}}')
    yield "bad_json", file(b'{"a":{"dtype":"F32",')
    yield "bad_not_object", file(b"[1,2,3]")
    yield "bad_header_length", file(header(basic), w + b, length=2**40)
    yield "bad_short", b"\x10\x00\x00"


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in seeds():
        assert len(data) < 4096, name
        with open(os.path.join(OUT, name + ".safetensors"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
