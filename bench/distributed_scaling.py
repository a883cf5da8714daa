#!/usr/bin/python3
"""Data-parallel scaling of `volt train`: throughput (samples/s) of 2 ranks x 1 thread under
mpirun against 1 process x 1 thread, at the same global batch, in alternating rounds of one run.

Models: the DLRM-style recommender of bench/dlrm_compare.py (8 tables of 100k x 64, 4 lookups
each, row-sparse gradients, lazy Adam) and the bundled MLP (models/mnist_mlp.onnx), batch 512.
For the DLRM it also reports the bytes each rank exchanges per optimizer step with the sparse
exchange and with the dense all-reduce of the tables (sparse_allreduce_threshold=0).

  /usr/bin/python3 bench/distributed_scaling.py [--rounds 5] [--steps 30] [--mlp-steps 200]
      [--results FILE]
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import dlrm_compare  # noqa: E402

VOLT = os.path.join(ROOT, "build", "bin", "volt")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none", "OMP_NUM_THREADS": "1"}


def dlrm_data(folder, samples, tables, rows, lookups):
    rng = np.random.default_rng(3)
    args = ["--input", "dense=" + save(folder, "dense", rng.standard_normal((samples, 13)).astype(np.float32))]
    for t in range(tables):
        ids = rng.integers(0, rows, (samples, lookups), dtype=np.int64)
        args += ["--input", f"ids{t}=" + save(folder, f"ids{t}", ids)]
    return args + ["--label", save(folder, "label", rng.integers(0, 2, samples, dtype=np.int64))]


def mlp_data(folder, samples):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((samples, 784)).astype(np.float32)
    return ["--input", "x=" + save(folder, "x", x),
            "--label", save(folder, "y", rng.integers(0, 10, samples, dtype=np.int64))]


def save(folder, name, array):
    path = os.path.join(folder, name + ".npy")
    np.save(path, array)
    return path


def train(model, data, ranks, batch, extra=()):
    """samples/s of the second epoch (the first builds the plans), and the exchange line."""
    cmd = [VOLT, "train", model, *data, "--batch", str(batch), "--epochs", "2", "--threads", "1",
           "--optimizer", "adam", *extra]
    env = dict(os.environ, **MPI_ENV)
    if ranks > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "core", "-np", str(ranks)] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    speed = float(re.search(r"epoch 2: train loss [0-9.naninf]+, ([0-9.]+) samples/s", out.stdout).group(1))
    m = re.search(r"(\d+) bytes exchanged", out.stdout)
    return speed, int(m.group(1)) if m else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds (5: single runs on a shared 2-core machine move by half)")
    p.add_argument("--steps", type=int, default=30, help="optimizer steps per epoch (DLRM)")
    p.add_argument("--mlp-steps", type=int, default=200,
                   help="optimizer steps per epoch (MLP: its steps are short, so more of them)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--results", help="append the table to this Markdown file")
    a = p.parse_args()
    if not shutil.which("mpirun"):
        sys.exit("mpirun not found: apt-get install openmpi-bin libopenmpi-dev")
    folder = tempfile.mkdtemp(prefix="volt_scaling_")
    try:
        dargs = types.SimpleNamespace(tables=8, rows=100000, lookups=4)
        samples = a.batch * a.steps
        cases = [
            ("dlrm (8 x 100k x 64, lazy Adam)", dlrm_compare.build(dargs, folder),
             dlrm_data(folder, samples, 8, 100000, 4)),
            ("mlp (mnist_mlp.onnx)", os.path.join(ROOT, "models", "mnist_mlp.onnx"),
             mlp_data(folder, a.batch * a.mlp_steps)),
        ]
        rows, ok = [], True
        for name, model, data in cases:
            one, two, sent = [], [], 0
            for _ in range(a.rounds):  # alternating, so that noise hits both alike
                one.append(train(model, data, 1, a.batch)[0])
                speed, sent = train(model, data, 2, a.batch)
                two.append(speed)
            s1, s2 = statistics.median(one), statistics.median(two)
            ratio = s2 / s1
            ok = ok and ratio >= 1.7
            line = f"| {name} | {a.batch} | {s1:.0f} | {s2:.0f} | {ratio:.2f}x | {sent / 1e6:.3f} MB |"
            if name.startswith("dlrm"):
                dense = train(model, data, 2, a.batch, ["--option", "sparse_allreduce_threshold=0"])
                line += f" {dense[1] / 1e6:.1f} MB ({dense[0]:.0f} samples/s) |"
            else:
                line += " - |"
            rows.append(line)
            print(line, flush=True)
        header = ["| model | global batch | 1 process x 1 thread (samples/s) | 2 ranks x 1 thread "
                  "(samples/s) | speed-up (floor 1.7x) | exchanged per rank per step | "
                  "dense all-reduce of the tables |",
                  "|---|---|---|---|---|---|---|"]
        table = "\n".join(header + rows)
        print("\n" + table)
        print("floors:", "met" if ok else "NOT met")
        if a.results:
            with open(a.results, "a") as f:
                f.write("\n## Data-parallel scaling (bench/distributed_scaling.py, median of "
                        f"{a.rounds} alternating rounds)\n\n{table}\n")
        return 0 if ok else 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
