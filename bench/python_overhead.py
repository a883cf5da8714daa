#!/usr/bin/env python3
"""What volt.InferenceSession.run adds over the C++ Session::run it wraps.

For each model, in alternating rounds on one session and one feed: N calls of
InferenceSession.run from a Python loop, then N calls of Session::run timed inside C++
(_volt.Session.time_native). The difference per call is the Python layer's cost: dict
conversion, numpy views of the inputs, arrays over the outputs, the GIL hand-off.

  PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--rounds 7] [--calls 20000]

Models: a tiny one (Add of two [1, 16] floats) and one with a 4 MB input and a 4 MB output
(Relu of [1024, 1024] floats), where a copy of either would show as ~0.3+ ms.
"""

import argparse
import statistics
import sys
import time

import numpy as np
from onnx import TensorProto, helper

import volt


def model(op, shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    inputs = ["x", "x"] if op == "Add" else ["x"]
    graph = helper.make_graph([helper.make_node(op, inputs, ["y"])], "g", [x], [y])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def python_seconds_per_call(sess, feed, calls):
    run = sess.run
    start = time.perf_counter()
    for _ in range(calls):
        run(None, feed)
    return (time.perf_counter() - start) / calls


def measure(name, op, shape, rounds, calls):
    so = volt.SessionOptions()
    so.intra_op_num_threads = 1
    sess = volt.InferenceSession(model(op, shape), so)
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    out = sess.run(None, feed)[0]
    assert out.base is not None, "the output was copied"
    python_times, native_times = [], []
    python_seconds_per_call(sess, feed, calls // 10)  # warm-up
    for _ in range(rounds):
        python_times.append(python_seconds_per_call(sess, feed, calls))
        native_times.append(sess._sess.time_native(feed, calls))
    py_us = statistics.median(python_times) * 1e6
    cpp_us = statistics.median(native_times) * 1e6
    # Per-round differences: the noise in the overhead itself.
    diffs = sorted((p - c) * 1e6 for p, c in zip(python_times, native_times))
    return name, cpp_us, py_us, py_us - cpp_us, diffs[0], diffs[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000, help="calls per round, tiny model")
    args = ap.parse_args()
    rows = [
        measure("tiny: Add [1,16] fp32", "Add", [1, 16], args.rounds, args.calls),
        measure("4 MB: Relu [1024,1024] fp32", "Relu", [1024, 1024], args.rounds,
                max(args.calls // 100, 20)),
    ]
    print(f"volt {volt.__version__}, python {sys.version.split()[0]}, numpy {np.__version__}, "
          f"1 intra-op thread, median of {args.rounds} rounds")
    print("| model | C++ Session::run (us) | volt.InferenceSession.run (us) | added (us) | added, "
          "min..max of rounds |")
    print("|---|---:|---:|---:|---:|")
    for name, cpp_us, py_us, added, lo, hi in rows:
        print(f"| {name} | {cpp_us:.2f} | {py_us:.2f} | {added:.2f} | {lo:.2f}..{hi:.2f} |")


if __name__ == "__main__":
    main()
