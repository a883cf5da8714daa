#!/usr/bin/python3
"""Single ops at the sizes real models run them, volt vs ONNX Runtime 1.30 CPU, side by side.

Each case is a one-node model (python3-onnx) with seeded inputs at a size taken from a model
that runs the op (a segmentation head's Softmax over classes, attention's Einsum, YOLO's Mish,
an audio model's 1-D pooling, a detector's TopK and RoiAlign, ...). Both sides read the same
.npy inputs: `volt bench --input` and bench/ort_bench.mjs, alternating, the median of the
rounds' p50. The outputs are compared (volt's through the Python package, ORT's as written by
ort_bench.mjs): the largest difference over the output's largest magnitude. The table is for
finding slow paths, which the corpus only finds where its models happen to use an op: a
ratio above 1 is an op to look at. Below 1 it overstates volt's lead for ops with large outputs:
ORT's column includes its node binding's copy of the output into JavaScript (about 1 ms for
3 MB) as well as the 20-30 us each call costs.

  /usr/bin/python3 bench/ops/single_ops.py [--cases a,b] [--threads 2] [--rounds 1]
                                          [--results bench/RESULTS.md]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto as TP
from onnx import helper as h
from onnx import numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "corpus"))
import compare  # noqa: E402  (ensure_ort)
import run_corpus  # noqa: E402  (write_section)

VOLT = os.path.join(ROOT, "build", "bin", "volt")
PYTHON_PACKAGE = os.path.join(ROOT, "build", "python")
rng = np.random.default_rng(0)


def f32(*s, lo=-1, hi=1):
    return rng.uniform(lo, hi, s).astype(np.float32)


# (name, op, graph inputs, attributes, initializers, opset, outputs)
cases = []
def case(name, op, inputs, attrs=None, consts=None, opset=17, nout=1):
    cases.append((name, op, inputs, attrs or {}, consts or {}, opset, nout))

case("instnorm", "InstanceNormalization", {"x": f32(1, 64, 128, 128)}, {}, {"s": f32(64), "b": f32(64)})
case("groupnorm", "GroupNormalization", {"x": f32(1, 320, 64, 64)}, {"num_groups": 32}, {"s": f32(320), "b": f32(320)}, opset=21)
case("depth2space", "DepthToSpace", {"x": f32(1, 64, 128, 128)}, {"blocksize": 2, "mode": "DCR"})
case("depth2space_crd", "DepthToSpace", {"x": f32(1, 64, 128, 128)}, {"blocksize": 2, "mode": "CRD"})
case("space2depth", "SpaceToDepth", {"x": f32(1, 16, 256, 256)}, {"blocksize": 2})
case("pad_reflect", "Pad", {"x": f32(1, 64, 128, 128)}, {"mode": "reflect"}, {"p": np.array([0,0,1,1,0,0,1,1], np.int64)})
case("pad_edge", "Pad", {"x": f32(1, 64, 128, 128)}, {"mode": "edge"}, {"p": np.array([0,0,3,3,0,0,3,3], np.int64)})
case("resize_nearest2x", "Resize", {"x": f32(1, 128, 80, 80)}, {"mode": "nearest"}, {"roi": np.zeros(0, np.float32), "sc": np.array([1,1,2,2], np.float32)})
case("resize_linear_ac", "Resize", {"x": f32(1, 64, 64, 64)}, {"mode": "linear", "coordinate_transformation_mode": "align_corners"}, {"roi": np.zeros(0, np.float32), "sc": np.array([1,1,4,4], np.float32)})
boxes = np.sort(rng.uniform(0, 48, (1000, 2, 2)).astype(np.float32), axis=1).transpose(0, 2, 1).reshape(1000, 4)
case("roialign", "RoiAlign", {"x": f32(1, 256, 50, 50)}, {"output_height": 7, "output_width": 7, "sampling_ratio": 2, "spatial_scale": 1.0}, {"rois": boxes, "bi": np.zeros(1000, np.int64)}, opset=16)
case("gridsample", "GridSample", {"x": f32(1, 32, 64, 64), "g": f32(1, 64, 64, 2)}, {"align_corners": 0}, opset=16)
case("einsum_qk", "Einsum", {"a": f32(1, 12, 128, 64), "b": f32(1, 12, 128, 64)}, {"equation": "bhqd,bhkd->bhqk"})
case("layernorm", "LayerNormalization", {"x": f32(8, 128, 768)}, {"axis": -1}, {"s": f32(768), "b": f32(768)})
case("reducemean_hw", "ReduceMean", {"x": f32(1, 256, 64, 64)}, {"axes": [2, 3], "keepdims": 1}, opset=13)
case("reducesum_c", "ReduceSum", {"x": f32(1, 256, 64, 64)}, {"keepdims": 1}, {"ax": np.array([1], np.int64)}, opset=13)
case("reducemax_last", "ReduceMax", {"x": f32(64, 1024, 128)}, {"axes": [2], "keepdims": 0}, opset=13)
case("cumsum", "CumSum", {"x": f32(16, 100000)}, {}, {"ax": np.array(1, np.int64)})
case("gather_embed", "Gather", {}, {"axis": 0}, {"w": f32(30000, 768), "i": rng.integers(0, 30000, (8, 128)).astype(np.int64)})
case("gather_embed_in", "Gather", {"w": f32(30000, 768), "i": rng.integers(0, 30000, (8, 128)).astype(np.int64)}, {"axis": 0})
case("argmax", "ArgMax", {"x": f32(1, 1000, 4000)}, {"axis": 1, "keepdims": 0})
case("conv1d_wav2vec", "Conv", {"x": f32(1, 1, 160000)}, {"kernel_shape": [10], "strides": [5]}, {"w": f32(512, 1, 10)})
case("conv1d_k3", "Conv", {"x": f32(1, 512, 4000)}, {"kernel_shape": [3], "strides": [2]}, {"w": f32(512, 512, 3)})
case("conv1d_k2", "Conv", {"x": f32(1, 512, 2000)}, {"kernel_shape": [2], "strides": [2]}, {"w": f32(512, 512, 2)})
case("conv1d_dw31", "Conv", {"x": f32(1, 256, 500)}, {"kernel_shape": [31], "pads": [15, 15], "group": 256}, {"w": f32(256, 1, 31)})
case("convt1d", "ConvTranspose", {"x": f32(1, 256, 2000)}, {"kernel_shape": [4], "strides": [2], "pads": [1, 1]}, {"w": f32(256, 128, 4)})
case("matmul_batched", "MatMul", {"a": f32(12, 128, 64), "b": f32(12, 64, 128)})
case("erf", "Erf", {"x": f32(8, 128, 3072)})
case("pow2", "Pow", {"x": f32(8, 128, 3072)}, {}, {"e": np.array(2.0, np.float32)})
case("lrn", "LRN", {"x": f32(8, 64, 56, 56)}, {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0})
case("prelu", "PRelu", {"x": f32(1, 64, 128, 128)}, {}, {"s": f32(64, 1, 1)})
case("logsoftmax", "LogSoftmax", {"x": f32(64, 32000)}, {"axis": -1})
case("softmax_axis1", "Softmax", {"x": f32(8, 1000, 196)}, {"axis": 1})
case("topk_large", "TopK", {"x": f32(4, 100000)}, {"axis": -1}, {"k": np.array([100], np.int64)}, nout=2)
case("where", "Where", {"c": rng.integers(0, 2, (8, 128, 768)).astype(bool), "a": f32(8, 128, 768), "b": f32(8, 128, 768)})
case("expand", "Expand", {"x": f32(1, 1, 768)}, {}, {"s": np.array([64, 128, 768], np.int64)})
case("tile", "Tile", {"x": f32(8, 64, 64)}, {}, {"r": np.array([4, 2, 2], np.int64)})
case("transpose_0213", "Transpose", {"x": f32(8, 128, 12, 64)}, {"perm": [0, 2, 1, 3]})
case("concat_axis1", "Concat", {"a": f32(8, 64, 56, 56), "b": f32(8, 64, 56, 56)}, {"axis": 1})
case("slice_steps", "Slice", {"x": f32(1, 64, 256, 256)}, {}, {"st": np.array([0, 0], np.int64), "en": np.array([256, 256], np.int64), "ax": np.array([2, 3], np.int64), "sp": np.array([2, 2], np.int64)})
case("maxpool_ceil", "MaxPool", {"x": f32(8, 64, 112, 112)}, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1})
case("avgpool_pad", "AveragePool", {"x": f32(8, 64, 56, 56)}, {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 0})
case("scatternd", "ScatterND", {"x": f32(1000, 256), "i": rng.permutation(1000)[:500].reshape(500, 1).astype(np.int64), "u": f32(500, 256)})
case("scatter_elems", "ScatterElements", {"x": f32(64, 1000), "i": rng.integers(0, 1000, (64, 100)).astype(np.int64), "u": f32(64, 100)}, {"axis": 1})
case("groupnorm18", "GroupNormalization", {"x": f32(1, 320, 64, 64)}, {"num_groups": 32}, {"s": f32(32), "b": f32(32)}, opset=18)
case("resize_cubic", "Resize", {"x": f32(1, 32, 64, 64)}, {"mode": "cubic"}, {"roi": np.zeros(0, np.float32), "sc": np.array([1,1,2,2], np.float32)})
case("pad_const", "Pad", {"x": f32(1, 64, 128, 128)}, {"mode": "constant"}, {"p": np.array([0,0,1,1,0,0,1,1], np.int64)})
case("reduce_l2", "ReduceL2", {"x": f32(8, 512, 196)}, {"axes": [2], "keepdims": 1}, opset=13)
case("reduce_lse", "ReduceLogSumExp", {"x": f32(64, 32000)}, {"axes": [1], "keepdims": 1}, opset=13)
case("reduce_prod", "ReduceProd", {"x": f32(64, 1000, lo=0.9, hi=1.1)}, {"axes": [1], "keepdims": 0}, opset=13)
case("sum4", "Sum", {"a": f32(8, 64, 56, 56), "b": f32(8, 64, 56, 56), "c": f32(8, 64, 56, 56), "d": f32(8, 64, 56, 56)})
case("max2", "Max", {"a": f32(8, 64, 56, 56), "b": f32(8, 64, 56, 56)})
case("clip", "Clip", {"x": f32(8, 64, 56, 56)}, {}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)})
case("equal", "Equal", {"a": rng.integers(0, 3, (8, 128, 768)).astype(np.int64), "b": rng.integers(0, 3, (8, 128, 768)).astype(np.int64)})
case("less_f", "Less", {"a": f32(8, 128, 768), "b": f32(8, 128, 768)})
case("and", "And", {"a": rng.integers(0, 2, (8, 128, 768)).astype(bool), "b": rng.integers(0, 2, (8, 128, 768)).astype(bool)})
case("cast_i64_f32", "Cast", {"x": rng.integers(0, 1000, (8, 128, 768)).astype(np.int64)}, {"to": TP.FLOAT})
case("onehot", "OneHot", {"i": rng.integers(0, 1000, (64, 128)).astype(np.int64)}, {"axis": -1}, {"d": np.array(1000, np.int64), "v": np.array([0, 1], np.float32)})
case("split3", "Split", {"x": f32(8, 768, 3, 196)}, {"axis": 2}, nout=3)
case("mod_i", "Mod", {"a": rng.integers(1, 1000, (8, 128, 768)).astype(np.int64), "b": rng.integers(1, 100, (8, 128, 768)).astype(np.int64)})
case("neg_sqrt_div", "Div", {"a": f32(8, 128, 768), "b": f32(8, 128, 768, lo=0.5, hi=2)})
case("globalmaxpool", "GlobalMaxPool", {"x": f32(8, 512, 14, 14)})
case("maxpool2d_1xk", "MaxPool", {"x": f32(8, 256, 1, 4000)}, {"kernel_shape": [1, 3], "strides": [1, 2], "pads": [0, 1, 0, 1]})
case("maxpool1d", "MaxPool", {"x": f32(8, 256, 4000)}, {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})
case("convt3d", "ConvTranspose", {"x": f32(1, 64, 8, 28, 28)}, {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, {"w": f32(64, 32, 2, 2, 2)})
case("unique", "Unique", {"x": rng.integers(0, 5000, (100000,)).astype(np.int64)}, {"sorted": 1}, nout=4)
case("cumsum_rev", "CumSum", {"x": f32(16, 100000)}, {"reverse": 1}, {"ax": np.array(1, np.int64)})
case("hardmax", "Hardmax", {"x": f32(64, 32000)}, {"axis": -1})
case("hardsigmoid", "HardSigmoid", {"x": f32(8, 128, 768)})
case("leakyrelu_small", "LeakyRelu", {"x": f32(8, 500)}, {"alpha": 0.1})
case("sign", "Sign", {"x": f32(8, 128, 768)})
case("isnan", "IsNaN", {"x": f32(8, 128, 768)})
case("atan", "Atan", {"x": f32(8, 128, 768)})
case("softsign", "Softsign", {"x": f32(8, 128, 768)})
case("celu", "Celu", {"x": f32(8, 128, 768)}, {"alpha": 1.0})
case("selu", "Selu", {"x": f32(8, 128, 768)})
case("thresh_relu", "ThresholdedRelu", {"x": f32(8, 128, 768)})
case("bitshift", "BitShift", {"a": rng.integers(0, 1000, (8, 128, 768)).astype(np.uint32), "b": rng.integers(0, 8, (8, 128, 768)).astype(np.uint32)}, {"direction": "LEFT"})
case("reverse_seq", "ReverseSequence", {"x": f32(200, 32, 256), "l": rng.integers(1, 200, (32,)).astype(np.int64)}, {"batch_axis": 1, "time_axis": 0})
case("gathernd", "GatherND", {"x": f32(64, 1000, 64), "i": rng.integers(0, 1000, (64, 300, 1)).astype(np.int64)}, {"batch_dims": 1})
case("compress", "Compress", {"x": f32(8, 100000), "c": rng.integers(0, 2, (100000,)).astype(bool)}, {"axis": 1})
case("gather_elems", "GatherElements", {"x": f32(64, 10000)}, {"axis": 1}, {"i": rng.integers(0, 10000, (64, 5000)).astype(np.int64)})
case("nonzero", "NonZero", {"x": (rng.uniform(0, 1, (1, 100000)) > 0.5).astype(np.float32)})
case("cast_f16", "Cast", {"x": f32(8, 128, 3072)}, {"to": TP.FLOAT16})
case("bn_unfolded", "BatchNormalization", {"x": f32(8, 64, 56, 56)}, {}, {"s": f32(64), "b": f32(64), "m": f32(64), "v": f32(64, lo=0.5, hi=1.5)})
case("mish", "Mish", {"x": f32(8, 64, 56, 56)}, {}, opset=18)
case("hardswish", "HardSwish", {"x": f32(8, 64, 56, 56)})
case("sign_abs_floor", "Floor", {"x": f32(8, 128, 3072)})
case("qlinear_matmul", "MatMulInteger", {"a": rng.integers(0, 255, (128, 768)).astype(np.uint8)}, {}, {"b": rng.integers(-128, 127, (768, 768)).astype(np.int8)})
case("dequant", "DequantizeLinear", {"x": rng.integers(0, 255, (8, 128, 768)).astype(np.uint8)}, {}, {"s": np.array(0.02, np.float32), "z": np.array(128, np.uint8)})
case("gru_ish_sigmoid", "Sigmoid", {"x": f32(8, 128, 3072)})
case("range_like_trilu", "Trilu", {"x": f32(16, 512, 512)}, {"upper": 1})
case("maxunpool_argmax_pool", "MaxPool", {"x": f32(8, 64, 112, 112)}, {"kernel_shape": [2, 2], "strides": [2, 2]}, nout=2)
case("conv3d", "Conv", {"x": f32(1, 32, 16, 56, 56)}, {"kernel_shape": [3, 3, 3], "pads": [1, 1, 1, 1, 1, 1]}, {"w": f32(32, 32, 3, 3, 3)})
case("conv_grouped", "Conv", {"x": f32(1, 256, 56, 56)}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "group": 32}, {"w": f32(256, 8, 3, 3)})
case("conv_dilated", "Conv", {"x": f32(1, 256, 64, 64)}, {"kernel_shape": [3, 3], "pads": [4, 4, 4, 4], "dilations": [4, 4]}, {"w": f32(256, 256, 3, 3)})
case("conv_5x5_s2", "Conv", {"x": f32(1, 64, 128, 128)}, {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "strides": [2, 2]}, {"w": f32(128, 64, 5, 5)})
case("convt2d_k4s2", "ConvTranspose", {"x": f32(1, 256, 32, 32)}, {"kernel_shape": [4, 4], "strides": [2, 2], "pads": [1, 1, 1, 1]}, {"w": f32(256, 128, 4, 4)})



def build(tmp, name, op, inputs, attrs, consts, opset, nout):
    infos = [h.make_tensor_value_info(k, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[v.dtype], v.shape)
             for k, v in inputs.items()]
    inits = [nh.from_array(v, k) for k, v in consts.items()]
    outs = [f"y{i}" for i in range(nout)]
    node = h.make_node(op, list(inputs) + list(consts), outs, **attrs)
    graph = h.make_graph([node], name, infos, [h.make_empty_tensor_value_info(o) for o in outs], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    path = os.path.join(tmp, name + ".onnx")
    onnx.save(model, path)
    files = {}
    for k, v in inputs.items():
        files[k] = os.path.join(tmp, f"{name}_{k}.npy")
        np.save(files[k], v)
    return path, files, outs


def volt_p50(path, files, threads):
    cmd = [VOLT, "bench", path, "--threads", str(threads), "--json", "--iterations", "30", "--warmup", "3"]
    cmd += [f"--input={k}={f}" for k, f in files.items()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    return json.loads(p.stdout)["p50_ms"]


def ort_p50(module, path, files, threads, out_dir):
    cmd = ["node", os.path.join(ROOT, "bench", "ort_bench.mjs"), path, str(threads), "3", "30", out_dir]
    cmd += [f"{k}={f}" for k, f in files.items()]
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, VOLT_ORT_NODE=module),
                       timeout=600)
    if p.returncode:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    return json.loads(p.stdout)["p50_ms"]


def output_difference(path, files, outs, out_dir, threads):
    """Largest |volt - ort| over the largest |ort| of each output (exact match: 0)."""
    code = ("import json, sys, numpy as np, volt\n"
            "o = volt.SessionOptions(); o.intra_op_num_threads = int(sys.argv[2])\n"
            "s = volt.InferenceSession(sys.argv[1], o)\n"
            "feeds = {k: np.load(f) for k, f in json.loads(sys.argv[3]).items()}\n"
            "for i, y in enumerate(s.run(None, feeds)): np.save(sys.argv[4] + '/volt_' + str(i) + '.npy', y)\n")
    p = subprocess.run([sys.executable, "-c", code, path, str(threads), json.dumps(files), out_dir],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=PYTHON_PACKAGE))
    if p.returncode:
        raise RuntimeError("volt run: " + (p.stderr.strip().splitlines() or ["?"])[-1])
    worst = 0.0
    for i, name in enumerate(outs):
        a = np.load(os.path.join(out_dir, f"volt_{i}.npy"))
        if not os.path.exists(os.path.join(out_dir, name + ".npy")):
            return float("nan")  # (a dtype bench/npy.mjs does not write)
        b = np.load(os.path.join(out_dir, name + ".npy"))
        if a.shape != b.shape:
            return float("inf")
        if a.size == 0:
            continue
        if a.dtype == bool or b.dtype == bool:
            worst = max(worst, float(np.any(a != b)))
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        if same.all():
            continue
        scale = max(float(np.nanmax(np.abs(b64[np.isfinite(b64)]))) if np.isfinite(b64).any() else 1.0, 1e-30)
        worst = max(worst, float(np.nanmax(np.abs(a64 - b64)[~same])) / scale)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", help="comma-separated names (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--results", help="write the table into this Markdown file")
    args = ap.parse_args()
    module = compare.ensure_ort()
    only = set(args.cases.split(",")) if args.cases else None
    lines = [f"single ops: {args.threads} threads, median of {args.rounds} alternating rounds, p50",
             f"{'case':24} {'op':22} {'volt ms':>9} {'ort ms':>9} {'volt/ort':>9} {'max rel diff':>13}"]
    slower = 0
    with tempfile.TemporaryDirectory() as tmp:
        for c in cases:
            name, op = c[0], c[1]
            if only and name not in only:
                continue
            path, files, outs = build(tmp, *c)
            out_dir = os.path.join(tmp, name)
            os.makedirs(out_dir)
            try:
                v, o = [], []
                for _ in range(args.rounds):
                    v.append(volt_p50(path, files, args.threads))
                    o.append(ort_p50(module, path, files, args.threads, out_dir))
                vt, ot = statistics.median(v), statistics.median(o)
                diff = output_difference(path, files, outs, out_dir, args.threads)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                lines.append(f"{name:24} {op:22} failed: {str(e)[:90]}")
                print(lines[-1], file=sys.stderr, flush=True)
                continue
            slower += vt > ot
            lines.append(f"{name:24} {op:22} {vt:9.3f} {ot:9.3f} {vt / ot:9.2f} {diff:13.1e}")
            print(lines[-1], file=sys.stderr, flush=True)
    lines.append(f"slower than ORT: {slower}")
    text = "\n".join(lines)
    print(text)
    if args.results:
        run_corpus.write_section(args.results, "single-ops", "Single ops at model sizes (bench/ops/single_ops.py)", text)


if __name__ == "__main__":
    main()
