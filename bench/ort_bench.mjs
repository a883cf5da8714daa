// ONNX Runtime (onnxruntime-node, CPU) side of bench/compare.py: times one model on inputs read
// from .npy files, prints one JSON line. Also writes the outputs (as .npy) when asked, so the
// caller can check that volt and ONNX Runtime agree.
//   node bench/ort_bench.mjs MODEL THREADS WARMUP ITERATIONS OUT_DIR NAME=FILE.npy...
import path from "node:path";
import { createRequire } from "node:module";
import { readNpy, writeNpy } from "./npy.mjs";

const require = createRequire(import.meta.url);
const ort = require(process.env.VOLT_ORT_NODE || "onnxruntime-node");

const [model, threads, warmup, iterations, outDir, ...specs] = process.argv.slice(2);
const feeds = {};
for (const spec of specs) {
  const eq = spec.indexOf("=");
  feeds[spec.slice(0, eq)] = readNpy(ort, spec.slice(eq + 1));
}
const t0 = performance.now();
const session = await ort.InferenceSession.create(model, {
  intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: "all", executionMode: "sequential",
});
const loadMs = performance.now() - t0;
const t1 = performance.now();
let out = await session.run(feeds);
const firstMs = performance.now() - t1;
for (let i = 0; i < Number(warmup); i++) await session.run(feeds);
const times = [];
for (let i = 0; i < Number(iterations); i++) {
  const s = performance.now();
  out = await session.run(feeds);
  times.push(performance.now() - s);
}
times.sort((a, b) => a - b);
if (outDir && outDir !== "-") for (const name of session.outputNames) writeNpy(path.join(outDir, name.replace(/[^A-Za-z0-9._-]/g, "_") + ".npy"), out[name]);
const rss = process.resourceUsage().maxRSS / 1024;
console.log(JSON.stringify({ p50_ms: times[Math.floor(times.length / 2)], p90_ms: times[Math.floor(times.length * 0.9)], load_ms: loadMs, first_run_ms: firstMs, peak_rss_mib: rss }));
