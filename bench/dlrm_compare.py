#!/usr/bin/python3
"""Fine-tuning a DLRM-style recommender: volt with row-sparse gradients and lazy Adam, volt with
dense gradients (sparse_gradients=off), and PyTorch CPU with nn.Embedding(sparse=True) +
SparseAdam (Adam for the MLPs), side by side in one run, same weights, batch and threads.

Model: 13 dense features through a bottom MLP (512-256-64, ReLU); T tables of R x 64, each looked
up L times per sample (Gather, then a sum over the L rows); interaction by concatenation; top
MLP (512-256-2) and softmax cross-entropy on a click label.

  /usr/bin/python3 bench/dlrm_compare.py [--tables 8] [--rows 1000000] [--lookups 4] [--batch 256]
      [--threads 2] [--iterations 20] [--dense-iterations 3] [--skip-torch] [--skip-dense] [--csr]
"""
import argparse
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-openmp"
if os.path.isdir(OPENBLAS) and OPENBLAS not in os.environ.get("LD_LIBRARY_PATH", ""):
    os.environ["LD_LIBRARY_PATH"] = OPENBLAS + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DENSE, DIM = 13, 64
BOTTOM, TOP = [512, 256, DIM], [512, 256, 2]


def mlp_weights(rng, sizes, first):
    out, prev = [], first
    for s in sizes:
        out.append(((rng.standard_normal((s, prev)) * np.sqrt(2 / prev)).astype(np.float32),
                    np.zeros(s, np.float32)))
        prev = s
    return out


def weights(args):
    """The same weights on every call (fixed seed): the model file and PyTorch get them apart, so
    that this process does not hold the tables while volt runs."""
    rng = np.random.default_rng(1)
    bottom = mlp_weights(rng, BOTTOM, DENSE)
    top = mlp_weights(rng, TOP, DIM * (args.tables + 1))
    tables = [rng.standard_normal((args.rows, DIM), dtype=np.float32) * np.float32(0.01)
              for _ in range(args.tables)]
    return bottom, top, tables


def parameter_count(args):
    count, prev = 0, DENSE
    for s in BOTTOM:
        count, prev = count + s * prev + s, s
    prev = DIM * (args.tables + 1)
    for s in TOP:
        count, prev = count + s * prev + s, s
    return count + args.tables * args.rows * DIM


def build(args, folder, csr=False):
    """The model file; with csr=True each table is multiplied by a multi-hot input feat<t>
    [N, rows] (fed as CSR) instead of gathered by ids and summed."""
    bottom, top, tables = weights(args)
    nodes, inits = [], []

    def mlp(prefix, x, weights, last_relu):
        for i, (w, b) in enumerate(weights):
            inits.extend([numpy_helper.from_array(w, f"{prefix}_w{i}"),
                          numpy_helper.from_array(b, f"{prefix}_b{i}")])
            y = f"{prefix}_h{i}"
            nodes.append(helper.make_node("Gemm", [x, f"{prefix}_w{i}", f"{prefix}_b{i}"], [y], transB=1))
            if i + 1 < len(weights) or last_relu:
                nodes.append(helper.make_node("Relu", [y], [y + "_r"]))
                y += "_r"
            x = y
        return x

    bot = mlp("bottom", "dense", bottom, True)
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "bag_axis"))
    pooled = []
    for t in range(args.tables):
        inits.append(numpy_helper.from_array(tables[t], f"emb{t}"))
        if csr:
            nodes.append(helper.make_node("MatMul", [f"feat{t}", f"emb{t}"], [f"bag{t}"]))
        else:
            nodes.append(helper.make_node("Gather", [f"emb{t}", f"ids{t}"], [f"rows{t}"]))
            nodes.append(helper.make_node("ReduceSum", [f"rows{t}", "bag_axis"], [f"bag{t}"],
                                          keepdims=0))
        pooled.append(f"bag{t}")
    nodes.append(helper.make_node("Concat", [bot] + pooled, ["interaction"], axis=1))
    logits = mlp("top", "interaction", top, False)
    nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    inputs = [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["N", DENSE])]
    if csr:
        inputs += [helper.make_tensor_value_info(f"feat{t}", TensorProto.FLOAT, ["N", args.rows])
                   for t in range(args.tables)]
    else:
        inputs += [helper.make_tensor_value_info(f"ids{t}", TensorProto.INT64, ["N", args.lookups])
                   for t in range(args.tables)]
    graph = helper.make_graph(nodes, "dlrm", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 2])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    name = "dlrm_csr" if csr else "dlrm"
    path = os.path.join(folder, name + ".onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=name + ".weights", size_threshold=1024)
    return path


def run_volt(args, path, sparse, iterations, features="ids"):
    exe = os.path.join(ROOT, "build", "bin", "volt_dlrm_train")
    out = subprocess.run([exe, path, "--tables", str(args.tables), "--rows", str(args.rows),
                          "--lookups", str(args.lookups), "--batch", str(args.batch),
                          "--threads", str(args.threads), "--sparse-gradients", sparse,
                          "--features", features,
                          "--warmup", "2", "--iterations", str(iterations)],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"median=([\d.]+).*peak_rss_mib=(\d+) step_peak_mib=(\d+|unknown)", out)
    return float(m.group(1)), int(m.group(2)), m.group(3)


def run_torch(args, iterations):
    import torch
    bottom, top, tables = weights(args)
    torch.set_num_threads(args.threads)

    def mlp(weights, last_relu):
        layers = []
        for i, (w, b) in enumerate(weights):
            lin = torch.nn.Linear(w.shape[1], w.shape[0])
            lin.weight.data = torch.from_numpy(w.copy())
            lin.bias.data = torch.from_numpy(b.copy())
            layers.append(lin)
            if i + 1 < len(weights) or last_relu:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    bot, topm = mlp(bottom, True), mlp(top, False)
    embs = torch.nn.ModuleList()
    for t in tables:
        e = torch.nn.Embedding(t.shape[0], DIM, sparse=True)
        e.weight.data = torch.from_numpy(t)
        embs.append(e)
    dense_opt = torch.optim.Adam(list(bot.parameters()) + list(topm.parameters()), lr=1e-3)
    sparse_opt = torch.optim.SparseAdam(list(embs.parameters()), lr=1e-3)
    rng = np.random.default_rng(5)

    def batch():
        return (torch.from_numpy(rng.standard_normal((args.batch, DENSE), dtype=np.float32)),
                [torch.from_numpy(rng.integers(0, args.rows, (args.batch, args.lookups)))
                 for _ in tables],
                torch.from_numpy(rng.integers(0, 2, args.batch)))

    def step(b):
        x, ids, y = b
        z = torch.cat([bot(x)] + [e(i).sum(1) for e, i in zip(embs, ids)], 1)
        loss = torch.nn.functional.cross_entropy(topm(z), y)
        dense_opt.zero_grad()
        sparse_opt.zero_grad()
        loss.backward()
        dense_opt.step()
        sparse_opt.step()

    for _ in range(2):
        step(batch())
    times = []
    for _ in range(iterations):
        b = batch()
        t0 = time.perf_counter()
        step(b)
        times.append((time.perf_counter() - t0) * 1000)
    # VmHWM: this process's own peak (ru_maxrss would count the parent's from before exec).
    with open("/proc/self/status") as f:
        peak = next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmHWM:"))
    return statistics.median(times), peak, ""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tables", type=int, default=8)
    p.add_argument("--rows", type=int, default=1000000)
    p.add_argument("--lookups", type=int, default=4)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--dense-iterations", type=int, default=3)
    p.add_argument("--skip-torch", action="store_true")
    p.add_argument("--skip-dense", action="store_true")
    p.add_argument("--csr", action="store_true",
                   help="also train the model fed with CSR multi-hot features instead of ids")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = build(args, folder)
        state_mib = parameter_count(args) * 4 * 3 / 2**20  # weights, Adam's m and v
        print(f"DLRM-style: {args.tables} tables of {args.rows} x {DIM}, {args.lookups} lookups per "
              f"table per sample, batch {args.batch}, Adam, {args.threads} threads; weights and "
              f"Adam state: {state_mib:.0f} MiB", flush=True)
        rows = [("volt, row-sparse + lazy Adam",) + run_volt(args, path, "auto", args.iterations)]
        if args.csr:
            csr_path = build(args, folder, csr=True)
            rows.append(("volt, CSR multi-hot features, row-sparse + lazy Adam",)
                        + run_volt(args, csr_path, "auto", args.iterations, "csr"))
        if not args.skip_dense:
            rows.append(("volt, dense gradients (sparse_gradients=off)",)
                        + run_volt(args, path, "off", args.dense_iterations))
        if not args.skip_torch:
            # In a fresh process: this one's peak RSS includes writing the model.
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                rows.append(("PyTorch, Embedding(sparse=True) + SparseAdam",)
                            + pool.apply(run_torch, (args, args.iterations)))
        base = rows[0][1]
        # "beyond state": the resident peak while the timed steps ran, less the weights and the
        # optimizer state; what a step needs on top of them (plus the runtime's own code and
        # plans). It must not grow with the tables.
        print("| run | step ms (median) | ratio to volt sparse | peak RSS MiB | beyond state MiB |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, ms, rss, step_peak in rows:
            beyond = (f"{int(step_peak) - state_mib:.0f}" if step_peak not in ("", "unknown")
                      else "")
            print(f"| {name} | {ms:.2f} | {ms / base:.2f} | {rss} | {beyond} |")

if __name__ == "__main__":
    main()
