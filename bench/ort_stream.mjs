// ONNX Runtime (onnxruntime-node, CPU) side of bench/corpus/dynamic_shapes.py: runs one model on
// a sequence of feeds read from .npy files, each run timed on its own, and prints one JSON line
// with the times in order. The manifest is a JSON list of feeds ({"name": "file.npy", ...}); all
// files are read before the session is created, so only runs are timed.
//   node bench/ort_stream.mjs MODEL THREADS MANIFEST.json
import fs from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const ort = require(process.env.VOLT_ORT_NODE || "onnxruntime-node");

const DTYPES = { "<f4": ["float32", Float32Array], "<i8": ["int64", BigInt64Array], "<i4": ["int32", Int32Array] };

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString("latin1", 10, 10 + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").map((s) => s.trim()).filter((s) => s.length).map(Number);
  const [type, Ctor] = DTYPES[descr];
  const body = buf.subarray(10 + headerLen);
  return new ort.Tensor(type, new Ctor(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)), shape);
}

const [model, threads, manifest] = process.argv.slice(2);
const cache = new Map();  // one tensor per file: the stream repeats files
const feeds = JSON.parse(fs.readFileSync(manifest, "utf8")).map((f) => {
  const out = {};
  for (const [name, file] of Object.entries(f)) {
    if (!cache.has(file)) cache.set(file, readNpy(file));
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
