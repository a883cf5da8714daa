#!/usr/bin/python3
"""Fine-tunes every model of the real-model corpus through the C API, as a user would.

For each model of build/corpus/ (make_corpus.py writes them) at the first batch of its recipe,
on seeded inputs: build/bin/volt_finetune (bench/corpus/finetune_model.c) creates a trainer with
default options (mse on the first output against the model's own prediction perturbed by about
10%, Adam at 1e-5, or smaller where that overshoots), runs 10 steps on that one batch, whose training loss must go down (the
evaluation loss before and after is shown too: with BatchNormalization at batch 1 it may rise as
the running statistics move toward the one batch's); it exports the tuned model, which ONNX Runtime 1.30 then runs on the same inputs: its
first output must match the trainer's prediction (within 1e-3 of the output's scale, the
corpus's inference tolerance). One table, the count, and exit 1 below 100%.

  /usr/bin/python3 bench/corpus/finetune_corpus.py [--models a,b] [--results bench/RESULTS.md]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import compare  # noqa: E402  (ensure_ort, ort_run)
import run_corpus  # noqa: E402  (make_inputs, write_section, CORPUS, RTOL)

FINETUNE = os.path.join(ROOT, "build", "bin", "volt_finetune")
RATES = (1e-5, 1e-6, 1e-7, 1e-8)
VOLT_DTYPES = {"float32": 1, "uint8": 2, "int8": 3, "int32": 6, "int64": 7, "bool": 9, "float16": 10,
               "float64": 11}


def finetune(name, path, recipe, module, tmp):
    """One row: (ok, what happened)."""
    batch = recipe["batches"][0]
    feeds = run_corpus.make_inputs(name, recipe, batch, tmp)
    specs = []
    for input_name, npy in feeds.items():
        x = np.load(npy)
        raw = npy[:-4] + ".bin"
        x.tofile(raw)
        specs.append(f"{input_name}:{VOLT_DTYPES[str(x.dtype)]}:{'x'.join(map(str, x.shape))}:{raw}")
    out_dir = os.path.join(tmp, name + "_tuned")
    os.makedirs(out_dir, exist_ok=True)
    # Adam at 1e-5; where that overshoots (deep nets whose BatchNormalization was folded away
    # are badly conditioned: SGD diverges there too above ~1e-5), ten times smaller, down to 1e-8.
    for rate in RATES:
        p = subprocess.run([FINETUNE, path, out_dir, str(rate), *specs], capture_output=True, text=True)
        try:
            r = json.loads(p.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return False, f"volt_finetune exited {p.returncode}: {p.stderr.strip()[-200:]}"
        if "stage" in r:
            return False, f"{r['stage']}: {r['error'][:220]}"
        loss = (f"Adam {rate:g}: step loss {r['first_step']:.4g} -> {r['last_step']:.4g} "
                f"(eval {r['before']:.3g} -> {r['after']:.3g})")
        if r["ok"]:
            break
    if not r["ok"]:
        return False, loss + ": the loss did not go down"
    # The export, in ONNX Runtime, against the trainer's prediction.
    tuned = os.path.join(out_dir, "tuned.onnx")
    first = onnx.load(path, load_external_data=False).graph.output[0]
    ort_dir = os.path.join(out_dir, "ort")
    os.makedirs(ort_dir, exist_ok=True)
    try:
        compare.ort_run(module, tuned, {n: (f, None, None) for n, f in feeds.items()}, 2, 1, ort_dir)
    except subprocess.CalledProcessError as e:
        return False, loss + f"; ONNX Runtime cannot run the export: {e.stderr.strip()[-200:]}"
    ort = np.load(os.path.join(ort_dir, re.sub(r"[^A-Za-z0-9._-]", "_", first.name) + ".npy"))
    volt = np.fromfile(os.path.join(out_dir, "prediction.bin"), dtype=ort.dtype).reshape(ort.shape)
    diff = float(np.max(np.abs(volt.astype(np.float64) - ort)) / (np.max(np.abs(ort)) + 1e-12))
    if not diff <= run_corpus.RTOL:
        return False, loss + f"; the export in ONNX Runtime differs by {diff:.1e}"
    return True, loss + f"; export = ORT within {diff:.1e}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", help="comma-separated names (default: every model in build/corpus)")
    ap.add_argument("--results", help="write the table into this Markdown file, replacing its section")
    args = ap.parse_args()
    module = compare.ensure_ort()
    names = args.models.split(",") if args.models else sorted(
        f[:-5] for f in os.listdir(run_corpus.CORPUS) if f.endswith(".json"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(run_corpus.CORPUS, name + ".onnx")
            if not os.path.exists(path):
                rows.append((name, False, "missing: run bench/corpus/make_corpus.py"))
                continue
            with open(os.path.join(run_corpus.CORPUS, name + ".json")) as f:
                recipe = json.load(f)
            ok, what = finetune(name, path, recipe, module, tmp)
            rows.append((name, ok, what))
            print(f"{name}: {'ok' if ok else 'FAILED'}: {what}", file=sys.stderr, flush=True)
    width = max(len(n) for n, _, _ in rows)
    lines = [f"{'model':<{width}}  fine-tunes  what happened", "-" * (width + 60)]
    lines += [f"{n:<{width}}  {'yes' if ok else 'NO ':<10}  {what}" for n, ok, what in rows]
    passed = sum(ok for _, ok, _ in rows)
    lines.append(f"{passed} of {len(rows)} models fine-tune through the C API "
                 "(default options, 10 Adam steps lower the loss, the export runs in ONNX Runtime)")
    out = "\n".join(lines)
    print(out)
    if args.results:
        run_corpus.write_section(args.results, "finetune",
                                 "Fine-tuning the corpus (bench/corpus/finetune_corpus.py)", out)
    sys.exit(0 if rows and passed == len(rows) else 1)


if __name__ == "__main__":
    main()
