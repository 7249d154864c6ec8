#!/usr/bin/env python3
"""Write the seed corpus of the fuzz targets (tests/fuzz/seeds/).

Small valid files of every format, in the layouts keel writes (see
core/include/keel/io.h and data.h), so that the fuzzer starts past the
first checks. The output is deterministic; rerun this script and commit
the result when a format grows.  Usage: make_seeds.py [SEEDS_DIR]
"""
import gzip
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "seeds")

SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I8": 1, "U8": 1,
         "I32": 4, "I64": 8, "BOOL": 1}


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape); data bytes are a counter."""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = SIZES[dtype]
        for s in shape:
            n *= s
        if dtype == "BOOL":
            data = bytes(i & 1 for i in range(n))
        else:
            data = bytes((i * 7 + 1) & 0x3f for i in range(n))
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + n]}
        blob += data
    js = json.dumps(header, separators=(",", ":")).encode()
    js += b" " * (-len(js) % 8)
    return struct.pack("<Q", len(js)) + js + blob


def idx(code, fmt, dims, values):
    head = bytes([0, 0, code, len(dims)]) + b"".join(
        struct.pack(">I", d) for d in dims)
    return head + b"".join(struct.pack(">" + fmt, v) for v in values)


def gz(data):
    return gzip.compress(data, compresslevel=6, mtime=0)


def main():
    put("safetensors", "empty.safetensors", safetensors([]))
    put("safetensors", "f32_2x3.safetensors",
        safetensors([("w", "F32", [2, 3])]))
    put("safetensors", "scalar_and_empty.safetensors",
        safetensors([("s", "F64", []), ("e", "F32", [0]),
                     ("z", "I32", [2, 0, 3])]))
    put("safetensors", "every_dtype.safetensors",
        safetensors([(d.lower(), d, [2, 2]) for d in SIZES],
                    {"format": "pt", "step": "12"}))
    put("safetensors", "mlp.safetensors",
        safetensors([("fc1.weight", "F32", [4, 3]), ("fc1.bias", "F32", [4]),
                     ("fc2.weight", "F32", [2, 4]), ("fc2.bias", "F32", [2])],
                    {"keel": "0.1.0"}))

    files = {
        "u8_images": idx(0x08, "B", [2, 3, 3], range(18)),
        "u8_labels": idx(0x08, "B", [4], [1, 0, 9, 3]),
        "i8": idx(0x09, "b", [2, 2], [-1, 2, -3, 4]),
        "i16": idx(0x0B, "h", [3], [-300, 0, 300]),
        "i32": idx(0x0C, "i", [2, 1], [-70000, 70000]),
        "f32": idx(0x0D, "f", [2], [0.5, -2.25]),
        "f64": idx(0x0E, "d", [1, 1, 2], [1e-3, 3.5]),
        "empty": idx(0x08, "B", [0, 28, 28], []),
    }
    for name, data in files.items():
        put("idx", name + ".idx", data)
        put("idx", name + ".idx.gz", gz(data))
        # fuzz_idx_gzip: a damage byte (0: none), then the plain content.
        put("idx_gzip", name + ".bin", b"\x00" + data)

    with open(os.path.join(HERE, "..", "..", "conformance",
                           "keel-conform.example.yaml"), "rb") as f:
        put("conform_yaml", "example.yaml", f.read())
    put("conform_yaml", "devices.yaml",
        b"devices: [0, 1]\nkernel_devices: all\nseed: 7\n")
    put("conform_yaml", "features.yaml",
        b"features:\n  dtypes: [float32, int64]\n  collectives: false\n"
        b"tolerances:\n  float32: 1e-9\ntimeouts:\n  test: 5\n"
        b"  collective_ms: 100\ne2e:\n  steps: 3\n")
    put("conform_yaml", "known.yaml",
        b"known_failures:\n  - test: \"kernels.*\"\n    reason: slow\n"
        b"    issue: \"https://example.com/1\"\n  - test: \"memory/peer\"\n"
        b"    plugin: acme\n    version: \"1.*\"\n    device: \"X*\"\n"
        b"    reason: \"no peer access\"\n    issue: \"#2\"\n")

    jit_graphs()


def graph(values, inputs, constants, nodes, outputs, symbols=("batch",)):
    """A graph file for fuzz_jit: its weights are the harness's "w" [4, 3]
    and "b" [3]; @BYTES@ and @CRC@ are filled in by the harness."""
    doc = {
        "format": "keel.graph", "version": 1, "catalog_version": 2,
        "producer": "seed",
        "weights": {"file": "w.safetensors", "bytes": "@BYTES@",
                    "crc32": "@CRC@"},
        "symbols": list(symbols),
        "values": [{"dtype": d, "shape": s} for d, s in values],
        "inputs": [{"name": n, "value": v} for n, v in inputs],
        "constants": [{"name": n, "value": v} for n, v in constants],
        "nodes": [{"op": o, "inputs": i, "outputs": out, "attrs": a}
                  for o, i, out, a in nodes],
        "outputs": [{"name": n, "value": v} for n, v in outputs],
    }
    text = json.dumps(doc, indent=1)
    return (text.replace('"@BYTES@"', "@BYTES@")
            .replace('"@CRC@"', "@CRC@").encode())


def jit_graphs():
    f = "float32"
    w = [(f, [4, 3]), (f, [3])]
    put("jit", "linear_relu.json", graph(
        [(f, ["batch", 4])] + w + [(f, ["batch", 3]), (f, ["batch", 3]),
                                   (f, ["3*batch"])],
        [("x", 0)], [("w", 1), ("b", 2)],
        [("linear", [0, 1, 2], [3], {}), ("relu", [3], [4], {}),
         ("keel.reshape", [4], [5], {"shape": ["3*batch"]})],
        [("out0", 5)]))
    put("jit", "views.json", graph(
        [(f, ["batch", 4])] + w + [(f, [4, "batch"]), (f, [2, "batch"]),
                                   (f, [2, "batch", 3]),
                                   (f, [2, "batch", 3])],
        [("x", 0)], [("w", 1), ("b", 2)],
        [("keel.permute", [0], [3], {"perm": [1, 0]}),
         ("keel.slice", [3], [4], {"axis": 0, "start": 1, "stop": 4,
                                   "step": 2}),
         ("keel.expand", [4], [5], {"shape": [2, "batch", 3]}),
         ("softmax", [5], [6], {"axis": -1})],
        [("out0", 6)]))
    put("jit", "two_inputs.json", graph(
        [(f, ["batch", 3]), (f, ["batch", 3])] + w +
        [(f, ["batch", 3]), (f, ["batch", 3]), (f, ["batch"])],
        [("a", 0), ("y", 1)], [("w", 2), ("b", 3)],
        [("add", [0, 1], [4], {}), ("add", [4, 3], [5], {}),
         ("sum", [5], [6], {"axis": [1], "keepdim": False})],
        [("out0", 6), ("sum", 6)]))


if __name__ == "__main__":
    main()
