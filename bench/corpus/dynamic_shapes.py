#!/usr/bin/python3
"""New input shapes: what the corpus's models with a variable axis (a crop's width, a sentence's
length, a decoder's past) pay when fed a shape they have not seen, volt vs ONNX Runtime 1.30 CPU.

Two measurements per model, each in a fresh process per side, sides alternating per round:
- new shape: the session is warmed at the recipe's shape; then each of 8 sizes spread over the
  axis's range runs 1 + 10 times. "first/steady" is the first run over the median of the next 10,
  per size; the table gives the median over the sizes and the worst, and the first run's own time
  (median over the sizes) beside ORT's. Floor: the median <= 1.3.
- stream: 200 inputs of sizes drawn uniformly from the range (fixed seed; repeats happen, as in
  real traffic), each run once, after one warm-up run at the recipe's shape; the total time of
  the 200 runs. Floor: volt's total <= ORT's.
- recurring: three of the new sizes in turn, 100 times each (300 runs), after the warm-up at
  the recipe's shape; the total time. What a service fed a few shapes again and again sees
  (volt specializes a shape's plan at its eighth run). Reported, no floor.
Batch 1, the recipe's value ranges, 2 threads. The node binding adds 20-30 us to each ORT call,
which favours volt by at most 200 x 30 us = 6 ms on a stream total.

  /usr/bin/python3 bench/corpus/dynamic_shapes.py [--models a,b] [--threads 2] [--rounds 3]
                                                  [--results bench/RESULTS.md] [--floors]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import compare  # noqa: E402  (ensure_ort)
import run_corpus  # noqa: E402  (write_section)

CORPUS = os.path.join(ROOT, "build", "corpus")
PYTHON_PACKAGE = os.path.join(ROOT, "build", "python")
NEW_SIZES, STEADY_RUNS, STREAM, RECURRING_ROUNDS = 8, 10, 200, 100
FIRST_FLOOR, STREAM_FLOOR = 1.3, 1.0


def feed_for(name, r, size, tmp, files):
    """The recipe's inputs at batch 1 with the variable axis at `size`; one .npy per input."""
    dyn = {inp: axis for inp, axis in r["dynamic"]["axis"]}
    feeds = {}
    for spec in r["inputs"]:
        shape = [1 if d == "B" else d for d in spec["shape"]]
        if spec["name"] in dyn:
            shape[dyn[spec["name"]]] = size
        path = os.path.join(tmp, f"{name}_{spec['name']}_{'x'.join(map(str, shape))}.npy")
        if path not in files:
            rng = np.random.default_rng(zlib.crc32(path.encode()))
            lo, hi = spec["range"]
            if spec["dtype"].startswith("int"):
                x = rng.integers(lo, hi, size=shape, dtype=np.dtype(spec["dtype"]))
            else:
                x = rng.uniform(lo, hi, size=shape).astype(spec["dtype"])
            np.save(path, x)
            files.add(path)
        feeds[spec["name"]] = path
    return feeds


def sizes(r, name):
    d = r["dynamic"]
    lo, hi, m = d["range"][0], d["range"][1], d.get("multiple", 1)
    base = next(s["shape"][ax] for s in r["inputs"] for inp, ax in d["axis"] if s["name"] == inp)
    new = [int(round((lo + (hi - lo) * (i + 0.5) / NEW_SIZES) / m) * m) for i in range(NEW_SIZES)]
    new = [s if s != base else s + m for s in new]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    stream = [int(v) * m for v in rng.integers((lo + m - 1) // m, hi // m + 1, size=STREAM)]
    return base, new, stream


def run_side(side, model, manifest, threads, module):
    if side == "volt":
        cmd = [sys.executable, os.path.abspath(__file__), "--volt-stream", model, str(threads), manifest]
        env = dict(os.environ, PYTHONPATH=PYTHON_PACKAGE)
    else:
        cmd = ["node", os.path.join(ROOT, "bench", "ort_stream.mjs"), model, str(threads), manifest]
        env = dict(os.environ, VOLT_ORT_NODE=module)
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{side}: " + (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    return json.loads(p.stdout)["times_ms"]


def volt_stream(model, threads, manifest):
    """The volt side, in its own process: the same protocol as bench/ort_stream.mjs."""
    import time
    import volt
    with open(manifest) as f:
        steps = json.load(f)
    arrays = {}
    feeds = [{n: arrays.setdefault(p, np.load(p)) for n, p in s.items()} for s in steps]
    opts = volt.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = volt.InferenceSession(model, opts)
    times = []
    for f in feeds:
        t = time.perf_counter()
        sess.run(None, f)
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"times_ms": times}))


def measure(name, r, args, module, tmp):
    model = os.path.join(CORPUS, name + ".onnx")
    files = set()
    base, new, stream = sizes(r, name)
    warm = [feed_for(name, r, base, tmp, files)] * 3
    shape_steps = warm + [feed_for(name, r, s, tmp, files) for s in new for _ in range(1 + STEADY_RUNS)]
    stream_steps = warm[:1] + [feed_for(name, r, s, tmp, files) for s in stream]
    recurring = [feed_for(name, r, s, tmp, files) for s in new[1::3]]
    recurring_steps = warm[:1] + recurring * RECURRING_ROUNDS
    manifests = {}
    for kind, steps in (("shape", shape_steps), ("stream", stream_steps), ("recurring", recurring_steps)):
        manifests[kind] = os.path.join(tmp, f"{name}_{kind}.json")
        with open(manifests[kind], "w") as f:
            json.dump(steps, f)
    firsts = {"volt": [], "ort": []}
    first_ms = {"volt": [], "ort": []}
    totals = {"volt": [], "ort": []}
    recurring_totals = {"volt": [], "ort": []}
    for _ in range(args.rounds):
        for side in ("volt", "ort"):
            t = run_side(side, model, manifests["shape"], args.threads, module)[3:]
            ratios, first = [], []
            for i in range(len(new)):
                run = t[i * (1 + STEADY_RUNS):(i + 1) * (1 + STEADY_RUNS)]
                ratios.append(run[0] / statistics.median(run[1:]))
                first.append(run[0])
            firsts[side].append(ratios)
            first_ms[side].append(first)
            totals[side].append(sum(run_side(side, model, manifests["stream"], args.threads, module)[1:]))
            recurring_totals[side].append(
                sum(run_side(side, model, manifests["recurring"], args.threads, module)[1:]))
    row = {"model": name, "range": f"{r['dynamic']['range'][0]}-{r['dynamic']['range'][1]}"}
    for side in ("volt", "ort"):
        per_size = [statistics.median(col) for col in zip(*firsts[side])]  # median over rounds
        row[side + "_first_median"] = statistics.median(per_size)
        row[side + "_first_worst"] = max(per_size)
        row[side + "_first_ms"] = statistics.median(statistics.median(col) for col in zip(*first_ms[side]))
        row[side + "_stream_ms"] = statistics.median(totals[side])
        row[side + "_recurring_ms"] = statistics.median(recurring_totals[side])
    row["stream_ratio"] = row["volt_stream_ms"] / row["ort_stream_ms"]
    row["recurring_ratio"] = row["volt_recurring_ms"] / row["ort_recurring_ms"]
    return row


def table(rows, failures, args):
    out = [f"dynamic shapes: {args.threads} threads, batch 1, median of {args.rounds} alternating rounds",
           f"{'model':24} {'sizes':>8} {'first/steady volt':>18} {'(worst)':>8} {'ort':>6} {'first ms v/o':>14} "
           f"{'stream volt ms':>15} {'ort ms':>9} {'volt/ort':>9} "
           f"{'recurring volt ms':>18} {'ort ms':>9} {'volt/ort':>9}"]
    for r in rows:
        out.append(f"{r['model']:24} {r['range']:>8} {r['volt_first_median']:18.2f} {r['volt_first_worst']:8.2f} "
                   f"{r['ort_first_median']:6.2f} {r['volt_first_ms']:6.2f}/{r['ort_first_ms']:<7.2f} {r['volt_stream_ms']:15.1f} {r['ort_stream_ms']:9.1f} "
                   f"{r['stream_ratio']:9.2f} {r['volt_recurring_ms']:18.1f} {r['ort_recurring_ms']:9.1f} "
                   f"{r['recurring_ratio']:9.2f}")
    for name, why in failures:
        out.append(f"{name:24} failed: {why}")
    ok_first = sum(r["volt_first_median"] <= FIRST_FLOOR for r in rows)
    ok_stream = sum(r["stream_ratio"] <= STREAM_FLOOR for r in rows)
    out.append(f"first run at a new shape <= {FIRST_FLOOR}x steady: {ok_first} of {len(rows)}; "
               f"stream of {STREAM} <= ORT's total: {ok_stream} of {len(rows)}; failed: {len(failures)}")
    return "\n".join(out)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--volt-stream":
        volt_stream(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="comma-separated names (default: every corpus model with a variable axis)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", help="write the table into this RESULTS.md")
    ap.add_argument("--floors", action="store_true", help="exit 1 unless both floors hold on every model")
    args = ap.parse_args()
    recipes = {}
    for f in sorted(os.listdir(CORPUS)):
        if f.endswith(".json") and os.path.exists(os.path.join(CORPUS, f[:-5] + ".onnx")):
            with open(os.path.join(CORPUS, f)) as fh:
                r = json.load(fh)
            if "dynamic" in r:
                recipes[f[:-5]] = r
    names = args.models.split(",") if args.models else list(recipes)
    if not names:
        sys.exit("no corpus model with a variable axis: run bench/corpus/make_corpus.py first")
    module = compare.ensure_ort()
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                rows.append(measure(name, recipes[name], args, module, tmp))
                print(f"{name}: done", file=sys.stderr, flush=True)
            except (RuntimeError, KeyError) as e:
                failures.append((name, str(e)))
    text = table(rows, failures, args)
    print(text)
    if args.results:
        run_corpus.write_section(args.results, "dynamic", "New input shapes (bench/corpus/dynamic_shapes.py)", text)
    if args.floors and (failures or any(r["volt_first_median"] > FIRST_FLOOR or r["stream_ratio"] > STREAM_FLOOR
                                        for r in rows)):
        sys.exit(1)


if __name__ == "__main__":
    main()
