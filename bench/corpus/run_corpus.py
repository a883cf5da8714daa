#!/usr/bin/python3
"""The real-model corpus, volt vs ONNX Runtime 1.30 CPU (onnxruntime-node), side by side.

For each model of build/corpus/ (make_corpus.py writes them) and each batch of its recipe: the
same seeded inputs (.npy) go to `volt bench --input` and to bench/ort_bench.mjs, runs
alternate (volt, ort, volt, ort, ...), each side reports the median of its rounds' p50; outputs
are checked to agree (largest |volt - ort| over the output's largest magnitude); a profiled
volt run names the nodes that ran a reference loop. One table, then the geometric mean of the
latency ratios. The node binding adds 20-30 us to each ORT call: a model under 1 ms shows it.

  /usr/bin/python3 bench/corpus/run_corpus.py [--models a,b] [--threads 2] [--rounds 3]
                                             [--results bench/RESULTS.md] [--floors]
"""
import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import compare  # noqa: E402  (ensure_ort, ort_run)

VOLT = os.path.join(ROOT, "build", "bin", "volt")
CORPUS = os.path.join(ROOT, "build", "corpus")
RTOL = 1e-3          # outputs within 1e-3 of ORT's, relative to the output's scale
TARGET_S = 1.5       # each side's timed runs of a round take about this long


def make_inputs(name, r, batch, tmp):
    rng = np.random.default_rng(zlib.crc32(f"{name}/{batch}".encode()))  # hash() is salted per run
    feeds = {}
    for spec in r["inputs"]:
        shape = [batch if d == "B" else d for d in spec["shape"]]
        lo, hi = spec["range"]
        if spec["dtype"].startswith("int"):
            x = rng.integers(lo, hi, size=shape, dtype=np.dtype(spec["dtype"]))
        else:
            x = rng.uniform(lo, hi, size=shape).astype(spec["dtype"])
        path = os.path.join(tmp, f"{name}_{spec['name']}_{batch}.npy".replace("/", "_"))
        np.save(path, x)
        feeds[spec["name"]] = path
    return feeds


def volt_bench(model, feeds, threads, iterations, extra=()):
    cmd = [VOLT, "bench", model, "--threads", str(threads), "--iterations", str(iterations), "--warmup", "3",
           "--json", *extra]
    cmd += [f"--input={n}={p}" for n, p in feeds.items()]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    return json.loads(p.stdout), p.stderr


def ort_bench(module, model, feeds, threads, iterations, out_dir="-"):
    return compare.ort_run(module, model, {n: (p, None, None) for n, p in feeds.items()}, threads, iterations,
                           out_dir)


def agreement(model, feeds, module, threads, tmp):
    volt_dir, ort_dir = os.path.join(tmp, "volt_out"), os.path.join(tmp, "ort_out")
    for d in (volt_dir, ort_dir):
        os.makedirs(d, exist_ok=True)
        for f in os.listdir(d):
            os.remove(os.path.join(d, f))
    cmd = [VOLT, "run", model, "--threads", str(threads), "--output-dir", volt_dir]
    cmd += [f"--input={n}={p}" for n, p in feeds.items()]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}")
    ort = ort_bench(module, model, feeds, threads, 3, ort_dir)
    worst = 0.0
    for f in os.listdir(ort_dir):
        a, b = np.load(os.path.join(volt_dir, f)), np.load(os.path.join(ort_dir, f))
        if a.shape != b.shape:
            return math.inf, ort
        if b.size == 0:
            continue
        if b.dtype.kind in "iub":
            worst = max(worst, 0.0 if np.array_equal(a, b) else 1.0)
            continue
        worst = max(worst, float(np.max(np.abs(a.astype(np.float64) - b)) / (np.max(np.abs(b)) + 1e-12)))
    return worst, ort


REFERENCE_LINE = re.compile(r"reference kernels: (.*)")


def reference_nodes(model, feeds, threads, tmp):
    """The profile's 'reference kernels' line: 'none' or 'N nodes, X% of the run: Op xK, ...'."""
    _, err = volt_bench(model, feeds, threads, 1, ["--profile", os.path.join(tmp, "trace.json")])
    m = REFERENCE_LINE.search(err)
    return m.group(1) if m else "?"


def measure(name, path, r, batch, module, args, tmp):
    feeds = make_inputs(name, r, batch, tmp)
    worst, ort_first = agreement(path, feeds, module, args.threads, tmp)
    est_ms = max(ort_first["p50_ms"], 0.01)
    iterations = int(min(200, max(3, TARGET_S * 1000 / est_ms)))
    v, o = [], []
    for _ in range(args.rounds):
        v.append(volt_bench(path, feeds, args.threads, iterations)[0])
        o.append(ort_bench(module, path, feeds, args.threads, iterations))
    return dict(name=name, batch=batch, volt=statistics.median(x["p50_ms"] for x in v),
                ort=statistics.median(x["p50_ms"] for x in o), worst=worst,
                first_volt=statistics.median(x["first_run_ms"] for x in v),
                first_ort=statistics.median(x["first_run_ms"] for x in o),
                reference=reference_nodes(path, feeds, args.threads, tmp))


def table(rows, failures, args):
    lines = [f"corpus: {args.threads} threads, median of {args.rounds} alternating rounds, p50 latency",
             f"{'model':<28} {'batch':>5} {'volt ms':>9} {'ort ms':>9} {'volt/ort':>9} {'max rel diff':>12}  reference kernels"]
    for r in rows:
        lines.append(f"{r['name']:<28} {r['batch']:>5} {r['volt']:>9.3f} {r['ort']:>9.3f} {r['volt'] / r['ort']:>9.2f} "
                     f"{r['worst']:>12.1e}  {r['reference']}")
    for name, why in failures:
        lines.append(f"{name:<28} {'-':>5} {'failed':>9}  {why}")
    if rows:
        gm = math.exp(statistics.mean(math.log(r["volt"] / r["ort"]) for r in rows))
        lines.append(f"geometric mean volt/ort over {len(rows)} rows: {gm:.2f}; slower than ORT: "
                     f"{sum(r['volt'] > r['ort'] for r in rows)}; outputs beyond rtol {RTOL:g}: "
                     f"{sum(r['worst'] > RTOL for r in rows)}; rows with reference kernels: "
                     f"{sum(r['reference'] not in ('none',) for r in rows)}; failed: {len(failures)}")
    return "\n".join(lines)


def write_section(path, marker, title, table_text):
    """Puts `table_text` between <!-- marker --> and <!-- /marker --> in the Markdown file at
    `path`, replacing what was there, or appends it under `title`."""
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{start}\n```\n{table_text}\n```\n{end}"
    text = (text[:text.index(start)] + block + text[text.index(end) + len(end):]) if start in text \
        else text + f"\n## {title}\n\n" + block + "\n"
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="comma-separated names (default: every model in build/corpus)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, help="only this batch of each recipe")
    ap.add_argument("--results", help="write the table into this Markdown file, replacing its corpus section")
    ap.add_argument("--floors", action="store_true", help="exit 1 unless every floor of the corpus holds")
    args = ap.parse_args()
    module = compare.ensure_ort()
    names = args.models.split(",") if args.models else sorted(
        f[:-5] for f in os.listdir(CORPUS) if f.endswith(".json"))
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(CORPUS, name + ".onnx")
            if not os.path.exists(path):
                failures.append((name, "missing: run bench/corpus/make_corpus.py"))
                continue
            with open(os.path.join(CORPUS, name + ".json")) as f:
                r = json.load(f)
            for batch in r["batches"]:
                if args.batch and batch != args.batch:
                    continue
                try:
                    row = measure(name, path, r, batch, module, args, tmp)
                    rows.append(row)
                    print(f"{name} b{batch}: volt {row['volt']:.3f} ms, ort {row['ort']:.3f} ms, "
                          f"{row['volt'] / row['ort']:.2f}x, diff {row['worst']:.1e}, reference: {row['reference']}",
                          file=sys.stderr, flush=True)
                except Exception as e:  # noqa: BLE001  (one model's failure is a row, not the end)
                    failures.append((f"{name} b{batch}", str(e)[:200]))
                    print(f"{name} b{batch}: failed: {e}", file=sys.stderr, flush=True)
    out = table(rows, failures, args)
    print(out)
    if args.results:
        write_section(args.results, "corpus", "The real-model corpus (bench/corpus/run_corpus.py)", out)
    if args.floors:
        gm = math.exp(statistics.mean(math.log(r["volt"] / r["ort"]) for r in rows)) if rows else math.inf
        ok = (not failures and gm <= 0.75 and all(r["volt"] <= r["ort"] and r["worst"] <= RTOL and
                                                   r["reference"] == "none" for r in rows))
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
