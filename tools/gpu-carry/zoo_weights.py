#!/usr/bin/env python3
"""Carries exported models to a machine without Debian's torch in a few bytes: `pack` keeps the
graph and every small or integer tensor, and replaces each large float initializer by its mean
and standard deviation; `unpack` refills those from a seeded normal distribution. The refilled
weights are random like the originals (the zoo's models are untrained), with the same scale."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

TAG = "volt-skeleton:"


def pack(src, dst):
    m = onnx.load(src)
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.FLOAT and np.prod(t.dims) > 4096:
            a = numpy_helper.to_array(t)
            t.doc_string = f"{TAG}{float(a.mean())!r},{float(a.std())!r}"
            t.ClearField("raw_data")
            t.ClearField("float_data")
    onnx.save(m, dst)


def unpack(src, dst):
    m = onnx.load(src)
    rng = np.random.default_rng(11)
    for t in m.graph.initializer:
        if t.doc_string.startswith(TAG):
            mean, std = (float(v) for v in t.doc_string[len(TAG):].split(","))
            a = (rng.standard_normal(tuple(t.dims), dtype=np.float32) * std + mean).astype(np.float32)
            t.raw_data = a.tobytes()
            t.doc_string = ""
    onnx.save(m, dst)


if __name__ == "__main__":
    {"pack": pack, "unpack": unpack}[sys.argv[1]](sys.argv[2], sys.argv[3])
