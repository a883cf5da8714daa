// .npy files for the node side of the benchmarks (ort_bench.mjs, ort_stream.mjs): the dtypes the
// corpus and bench/ops/single_ops.py use, C order, little-endian.
import fs from "node:fs";

const DTYPES = {
  "<f4": ["float32", Float32Array], "<f8": ["float64", Float64Array], "<f2": ["float16", Uint16Array],
  "<i8": ["int64", BigInt64Array], "<i4": ["int32", Int32Array], "|i1": ["int8", Int8Array],
  "|u1": ["uint8", Uint8Array], "<u4": ["uint32", Uint32Array], "|b1": ["bool", Uint8Array],
};
const DESCR = Object.fromEntries(Object.entries(DTYPES).map(([descr, [type]]) => [type, descr]));

// An onnxruntime-node Tensor of the file's contents (`ort`: the loaded module).
export function readNpy(ort, file) {
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

export function writeNpy(file, tensor) {
  const descr = DESCR[tensor.type];
  if (!descr) return;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': (${tensor.dims.join(", ")}${tensor.dims.length === 1 ? "," : ""}), }`;
  header += " ".repeat((64 - ((10 + header.length + 1) % 64)) % 64) + "\n";
  const head = Buffer.alloc(10);
  head.write("\x93NUMPY", 0, "latin1");
  head[6] = 1;
  head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const values = tensor.type === "bool" ? Uint8Array.from(tensor.data, Number) : tensor.data;
  const data = Buffer.from(values.buffer, values.byteOffset, values.byteLength);
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, "latin1"), data]));
}
