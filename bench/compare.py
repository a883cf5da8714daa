#!/usr/bin/python3
"""Inference latency, volt vs ONNX Runtime 1.30 CPU (onnxruntime-node), side by side in one run.

For each model and batch: the same random inputs (.npy) go to `volt bench --json` and to
bench/ort_bench.mjs; runs alternate (volt, ort, volt, ort ...); each side reports the median of
its rounds' p50. Outputs are checked to agree (relative 1e-4 of the output's scale, fp32).
ONNX Runtime is installed on first use with `npm install --ignore-scripts` into build/peers.
The node binding adds 20-30 us per call: compare small models at a batch where that is noise.

  /usr/bin/python3 bench/compare.py [--threads 2] [--rounds 3] [--iterations 50] [--models mlp,cnn]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "build", "peers")
VOLT = os.path.join(ROOT, "build", "bin", "volt")

ZOO = os.path.join(ROOT, "build", "zoo")


def floats(name, shape):
    return (name, shape, None)


def ints(name, shape, lo, hi):
    return (name, shape, (lo, hi))


# name -> (model path, inputs [(name, shape for a batch, int range or None)], batch sizes)
MODELS = {
    "mlp": (os.path.join(ROOT, "models", "mnist_mlp.onnx"), [floats("x", lambda b: [b, 784])], [1, 64]),
    "cnn": (os.path.join(ROOT, "models", "small_cnn.onnx"), [floats("x", lambda b: [b, 1, 28, 28])], [1, 64]),
    "resnet50": (os.path.join(ZOO, "resnet50.onnx"), [floats("input", lambda b: [b, 3, 224, 224])], [1, 8]),
    "mobilenetv2": (os.path.join(ZOO, "mobilenetv2.onnx"), [floats("input", lambda b: [b, 3, 224, 224])], [1, 8]),
    "bert": (os.path.join(ZOO, "bert.onnx"),
             [ints("input_ids", lambda b: [b, 128], 0, 30522), ints("attention_mask", lambda b: [b, 128], 1, 2)], [1, 8]),
    "dlrm": (os.path.join(ZOO, "dlrm.onnx"),
             [floats("dense", lambda b: [b, 13]), ints("sparse", lambda b: [b, 8], 0, 100000)], [1, 256]),
}


def conv_gemm_gflop(model_path):
    """GFLOP per sample of a model's Conv, Gemm and MatMul nodes (2 per multiply-add), from ONNX
    shape inference with the batch dimension taken as 1."""
    import onnx
    from onnx import shape_inference
    m = onnx.load(model_path, load_external_data=False)
    for v in list(m.graph.input) + list(m.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_value = 1
    m = shape_inference.infer_shapes(m)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    shapes.update({t.name: list(t.dims) for t in m.graph.initializer})
    flops = 0
    for n in m.graph.node:
        out = shapes.get(n.output[0])
        if not out:
            continue
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            flops += 2 * np.prod(out) * np.prod(w[1:])
        elif n.op_type in ("Gemm", "MatMul"):
            a = shapes.get(n.input[0])
            if a:
                trans_a = any(at.name == "transA" and at.i for at in n.attribute)
                flops += 2 * np.prod(out) * (a[-2] if trans_a else a[-1])
    return flops / 1e9


def sgemm_peak(threads):
    exe = os.path.join(ROOT, "build", "bin", "volt_sgemm_peak")
    if not os.path.exists(exe):
        return None
    return json.loads(subprocess.run([exe, "--threads", str(threads)], check=True, capture_output=True,
                                     text=True).stdout)


def ensure_ort():
    module = os.path.join(PEERS, "node_modules", "onnxruntime-node")
    if not os.path.isdir(module):
        os.makedirs(PEERS, exist_ok=True)
        subprocess.run(["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", "--prefix", PEERS, "onnxruntime-node@1.30.0"],
                       check=True, stdout=subprocess.DEVNULL)
    return module


def volt_run(model, feeds, threads, iterations, precision):
    cmd = [VOLT, "bench", model, "--threads", str(threads), "--iterations", str(iterations), "--warmup", "5", "--json",
           "--precision", precision]
    for name, (path, shape, rng) in feeds.items():
        cmd += ["--shape", f"{name}={'x'.join(map(str, shape))}"]
        if rng:
            cmd += ["--range", f"{name}={rng[0]}:{rng[1]}"]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def ort_run(module, model, feeds, threads, iterations, out_dir="-"):
    cmd = ["node", os.path.join(ROOT, "bench", "ort_bench.mjs"), model, str(threads), "5", str(iterations), out_dir]
    cmd += [f"{name}={path}" for name, (path, _, _) in feeds.items()]
    env = dict(os.environ, VOLT_ORT_NODE=module)
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)


def agree(model, feeds, module, threads, tmp, precision):
    """The largest |volt - ort| relative to the output's largest magnitude, and the relative L2 error."""
    volt_dir, ort_dir = os.path.join(tmp, "volt_out"), os.path.join(tmp, "ort_out")
    os.makedirs(ort_dir, exist_ok=True)
    cmd = [VOLT, "run", model, "--threads", str(threads), "--output-dir", volt_dir, "--precision", precision]
    cmd += [f"--input={n}={p}" for n, (p, _, _) in feeds.items()]
    subprocess.run(cmd, check=True, capture_output=True)
    ort_run(module, model, feeds, threads, 1, ort_dir)
    worst, l2 = 0.0, 0.0
    for f in os.listdir(ort_dir):
        a, b = np.load(os.path.join(volt_dir, f)), np.load(os.path.join(ort_dir, f))
        worst = max(worst, float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-12)))
        l2 = max(l2, float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-12)))
    return worst, l2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--batches", help="comma-separated batch sizes instead of each model's own")
    ap.add_argument("--precision", default="fp32", help="volt's precision (fp32 | bf16); ONNX Runtime runs fp32")
    args = ap.parse_args()
    module = ensure_ort()
    peak = sgemm_peak(args.threads)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            path, inputs, batches = MODELS[name]
            if args.batches:
                batches = [int(b) for b in args.batches.split(",")]
            if not os.path.exists(path):
                print(f"{name}: {path} missing (make it with models/zoo/make_zoo.py)", file=sys.stderr)
                continue
            for batch in batches:
                feeds = {}
                rng = np.random.default_rng(batch)
                for input_name, shape_of, int_range in inputs:
                    shape = shape_of(batch)
                    if int_range:
                        x = rng.integers(int_range[0], int_range[1], size=shape, dtype=np.int64)
                    else:
                        x = rng.random(shape, dtype=np.float32)
                    npy = os.path.join(tmp, f"{name}_{input_name}_{batch}.npy")
                    np.save(npy, x)
                    feeds[input_name] = (npy, shape, int_range)
                worst, l2 = agree(path, feeds, module, args.threads, tmp, args.precision)
                v, o = [], []
                for _ in range(args.rounds):
                    v.append(volt_run(path, feeds, args.threads, args.iterations, args.precision))
                    o.append(ort_run(module, path, feeds, args.threads, args.iterations))
                vm, om = statistics.median(r["p50_ms"] for r in v), statistics.median(r["p50_ms"] for r in o)
                rows.append((name, batch, vm, om, worst, l2, max(r["peak_rss_mib"] for r in v), max(r["peak_rss_mib"] for r in o),
                             statistics.median(r["load_ms"] + r["first_run_ms"] for r in v), statistics.median(r["load_ms"] + r["first_run_ms"] for r in o)))
    print(f"inference p50 latency, {args.threads} threads, volt {args.precision} vs ONNX Runtime fp32, "
          f"median of {args.rounds} alternating rounds x {args.iterations} runs")
    print(f"{'model':<12} {'batch':>5} {'volt ms':>9} {'ort ms':>9} {'volt/ort':>9} {'max rel diff':>13} {'rel L2':>9} "
          f"{'rss v/o MiB':>13} {'load+1st v/o ms':>17}")
    for name, batch, v, o, worst, l2, rv, ro, fv, fo in rows:
        print(f"{name:<12} {batch:>5} {v:>9.3f} {o:>9.3f} {v / o:>9.2f} {worst:>13.1e} {l2:>9.1e} "
              f"{rv:>6.0f}/{ro:<6.0f} {fv:>8.0f}/{fo:<8.0f}")
    for name, batch, v, o, *_ in rows:
        # Conv and linear-layer FLOPs from ONNX shape inference: right for ResNet-50; BERT's
        # attention products have batch axes shape inference leaves symbolic, so it is not shown.
        if name == "resnet50" and batch > 1:
            g = conv_gemm_gflop(MODELS[name][0]) * batch
            line = f"{name} batch {batch}: {g:.1f} GFLOP a run; volt {g / v * 1e3:.0f} GFLOP/s, ORT {g / o * 1e3:.0f} GFLOP/s"
            if peak:
                line += (f"; oneDNN 2048^3 sgemm peak here {peak['sgemm_gflops']:.0f} GFLOP/s "
                         f"(bf16 {peak['bf16_gemm_gflops']:.0f})")
            print(line)


if __name__ == "__main__":
    main()
