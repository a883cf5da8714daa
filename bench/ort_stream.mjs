// ONNX Runtime (onnxruntime-node, CPU) side of bench/corpus/dynamic_shapes.py: runs one model on
// a sequence of feeds read from .npy files, each run timed on its own, and prints one JSON line
// with the times in order. The manifest is a JSON list of feeds ({"name": "file.npy", ...}); all
// files are read before the session is created, so only runs are timed.
//   node bench/ort_stream.mjs MODEL THREADS MANIFEST.json
import fs from "node:fs";
import { createRequire } from "node:module";
import { readNpy } from "./npy.mjs";

const require = createRequire(import.meta.url);
const ort = require(process.env.VOLT_ORT_NODE || "onnxruntime-node");

const [model, threads, manifest] = process.argv.slice(2);
const cache = new Map();  // one tensor per file: the stream repeats files
const feeds = JSON.parse(fs.readFileSync(manifest, "utf8")).map((f) => {
  const out = {};
  for (const [name, file] of Object.entries(f)) {
    if (!cache.has(file)) cache.set(file, readNpy(ort, file));
    out[name] = cache.get(file);
  }
  return out;
});
const session = await ort.InferenceSession.create(model, {
  intraOpNumThreads: Number(threads), interOpNumThreads: 1, graphOptimizationLevel: "all", executionMode: "sequential",
});
const times = [];
for (const f of feeds) {
  const s = performance.now();
  await session.run(f);
  times.push(performance.now() - s);
}
console.log(JSON.stringify({ times_ms: times }));
