// ONNX Runtime (onnxruntime-node, CPU) side of bench/compare.py: times one model on inputs read
// from .npy files, prints one JSON line. Also writes the outputs (as .npy) when asked, so the
// caller can check that volt and ONNX Runtime agree.
//   node bench/ort_bench.mjs MODEL THREADS WARMUP ITERATIONS OUT_DIR NAME=FILE.npy...
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const ort = require(process.env.VOLT_ORT_NODE || "onnxruntime-node");

const DTYPES = { "<f4": ["float32", Float32Array], "<i8": ["int64", BigInt64Array], "<i4": ["int32", Int32Array], "|b1": ["bool", Uint8Array] };

function readNpy(file) {
  const buf = fs.readFileSync(file);
  const headerLen = buf.readUInt16LE(8);
  const header = buf.toString("latin1", 10, 10 + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(",").map((s) => s.trim()).filter((s) => s.length).map(Number);
  const [type, Ctor] = DTYPES[descr];
  const body = buf.subarray(10 + headerLen);
  const data = new Ctor(body.buffer.slice(body.byteOffset, body.byteOffset + body.length));
  return new ort.Tensor(type, type === "bool" ? Array.from(data, Boolean) : data, shape);
}

function writeNpy(file, tensor) {
  const descr = { float32: "<f4", int64: "<i8", int32: "<i4" }[tensor.type];
  if (!descr) return;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${tensor.dims.join(", ")}${tensor.dims.length === 1 ? "," : ""}), }`;
  header += " ".repeat((64 - ((10 + header.length + 1) % 64)) % 64) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const data = Buffer.from(tensor.data.buffer, tensor.data.byteOffset, tensor.data.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, "latin1"), data]));
}

const [model, threads, warmup, iterations, outDir, ...specs] = process.argv.slice(2);
const feeds = {};
for (const spec of specs) {
  const eq = spec.indexOf("=");
  feeds[spec.slice(0, eq)] = readNpy(spec.slice(eq + 1));
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
