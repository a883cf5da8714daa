// volt — public C++ API.
//
//   volt::Session s("model.onnx", {.threads = 2});
//   auto out = s.run({{"x", volt::Tensor::from<float>({1, 2, 3, 4}, {1, 4})}});
//   const float* y = out[0].tensor().data<float>();
//
// Everything outside include/volt/ is private and may change.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace volt {

const char* version();

// ---------------------------------------------------------------------------------------------
// Errors: one exception type with a code. Codes mirror the C API's volt_status.
enum class ErrorCode : int {
  InvalidArgument = 1,  // bad input to a call: wrong name, shape, dtype, option
  InvalidModel = 2,     // the model is malformed or inconsistent
  NotImplemented = 3,   // valid ONNX that volt does not run (yet)
  Io = 4,               // a file could not be read or written
  OutOfMemory = 5,      // an allocation failed or would pass a configured limit
  Runtime = 6,          // a failure while running (numerical, internal)
  Device = 7,           // accelerator errors
  Cancelled = 8,        // the run was cancelled
  Timeout = 9,          // the run passed its deadline
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// ---------------------------------------------------------------------------------------------
// Element types, numbered as ONNX's TensorProto.DataType.
enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  UInt32 = 12,
  UInt64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
};

const char* dtype_name(DType t);  // "float32", "int64", ...
size_t dtype_size(DType t);       // bytes per element; sizeof(std::string) for String
bool dtype_is_valid(int32_t onnx_number);

// IEEE half and bfloat16 storage types with round-to-nearest-even conversion.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f);
  explicit operator float() const;
  static Float16 from_bits(uint16_t b) {
    Float16 h;
    h.bits = b;
    return h;
  }
};
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f);
  explicit operator float() const;
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
};

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::Double;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return DType::Int8;
}
template <>
constexpr DType dtype_of<int16_t>() {
  return DType::Int16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::Int32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::UInt8;
}
template <>
constexpr DType dtype_of<uint16_t>() {
  return DType::UInt16;
}
template <>
constexpr DType dtype_of<uint32_t>() {
  return DType::UInt32;
}
template <>
constexpr DType dtype_of<uint64_t>() {
  return DType::UInt64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::Bool;
}
template <>
constexpr DType dtype_of<Float16>() {
  return DType::Float16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::BFloat16;
}
template <>
constexpr DType dtype_of<std::string>() {
  return DType::String;
}

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[1,3,224,224]"

// Where a tensor's buffer lives: host memory, or an accelerator's. `data()` of a device tensor
// is a device pointer, for device code only.
struct Device {
  enum class Kind : uint8_t { Cpu = 0, Cuda = 1 };
  Kind kind = Kind::Cpu;
  int index = 0;
  bool is_cpu() const { return kind == Kind::Cpu; }
  bool operator==(const Device&) const = default;
  std::string str() const;  // "cpu", "cuda:0"
  // "cpu", "cuda" (device 0) or "cuda:N"; anything else is ErrorCode::Device.
  static Device parse(const std::string& text);
};
// Devices of `kind` this build and machine can use now: 1 for Cpu; for Cuda, 0 when the build has
// no CUDA backend, its library did not load or the machine has no GPU.
int device_count(Device::Kind kind);

// ---------------------------------------------------------------------------------------------
// A dense tensor: dtype, shape and a contiguous row-major buffer shared between copies of the
// handle (copying a Tensor does not copy data; clone() does).
class Tensor {
 public:
  Tensor() = default;

  // A new tensor of this dtype and shape; numeric data zero-filled, strings empty.
  static Tensor empty(DType dtype, Shape shape);
  // A new tensor holding a copy of `data` (numel(shape) elements of dtype).
  static Tensor copy_of(DType dtype, Shape shape, const void* data);
  // A tensor over memory someone else owns: `owner` keeps it alive, nothing is copied. `device`
  // says whose memory `data` is (a CUDA device pointer for Device::Kind::Cuda).
  static Tensor view(DType dtype, Shape shape, void* data, std::shared_ptr<void> owner,
                     Device device = {});
  // A new, uninitialized tensor on `device` (its allocator's memory; ErrorCode::Device when this
  // build or machine has no such device).
  static Tensor empty_on(Device device, DType dtype, Shape shape);

  template <class T>
  static Tensor from(const std::vector<T>& values, Shape shape) {
    check_count(values.size(), shape);
    Tensor t = empty(dtype_of<T>(), std::move(shape));
    for (size_t i = 0; i < values.size(); ++i) t.data<T>()[i] = values[i];
    return t;
  }
  template <class T>
  static Tensor from(std::initializer_list<T> values, Shape shape) {
    return from(std::vector<T>(values), std::move(shape));
  }
  template <class T>
  static Tensor scalar(T v) {
    return from(std::vector<T>{v}, {});
  }

  bool defined() const { return dtype_ != DType::Undefined; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <class T>
  T* data() {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<const T*>(data_);
  }

  // The same buffer seen with another shape of the same element count.
  Tensor reshaped(Shape shape) const;
  // A deep copy that owns its buffer, on the same device.
  Tensor clone() const;
  // A copy on `device` (this tensor itself when it is already there). Waits for the copy.
  Tensor to(Device device) const;
  Device device() const { return device_; }
  // The buffer's owner (for views that must keep it alive).
  const std::shared_ptr<void>& owner() const { return owner_; }

 private:
  void check_dtype(DType requested) const;
  static void check_count(size_t count, const Shape& shape);

  DType dtype_ = DType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  void* data_ = nullptr;
  std::shared_ptr<void> owner_;
  Device device_;
};

int64_t numel_of(const Shape& shape);  // throws on negative dims or overflow

// ---------------------------------------------------------------------------------------------
// A 2-D sparse matrix in compressed sparse row form: row r's non-zeros are
// values[row_offsets[r] .. row_offsets[r+1]) in columns col_indices[same range]. Column indices
// need not be sorted within a row; duplicates add up. Immutable once built.
class CsrTensor {
 public:
  CsrTensor() = default;
  // Checks everything (sizes, offsets non-decreasing from 0 to nnz, columns in range) and throws
  // ErrorCode::InvalidArgument naming the first problem. `row_offsets` and `col_indices` are
  // int64 tensors of [rows + 1] and [nnz]; `values` is [nnz] of the element type.
  static CsrTensor create(int64_t rows, int64_t cols, Tensor row_offsets, Tensor col_indices,
                          Tensor values);
  // Copies raw arrays (the C API's form).
  static CsrTensor copy_of(DType dtype, int64_t rows, int64_t cols, int64_t nnz,
                           const int64_t* row_offsets, const int64_t* col_indices,
                           const void* values);
  // The non-zeros of a dense 2-D tensor.
  static CsrTensor from_dense(const Tensor& dense);

  bool defined() const { return values_.defined(); }
  DType dtype() const { return values_.dtype(); }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t nnz() const { return values_.numel(); }
  Shape shape() const { return {rows_, cols_}; }
  const Tensor& row_offsets() const { return row_offsets_; }
  const Tensor& col_indices() const { return col_indices_; }
  const Tensor& values() const { return values_; }
  // The dense [rows, cols] tensor (duplicates summed).
  Tensor to_dense() const;
  // A copy on `device` (the three arrays moved; nothing checked again).
  CsrTensor to(Device device) const;

 private:
  int64_t rows_ = 0, cols_ = 0;
  Tensor row_offsets_, col_indices_, values_;
};

// A tensor of which only some slices along axis 0 are stored: the gradient of an embedding table
// (or of a weight multiplied by a CSR input) that a batch touched in a few rows. `rows` holds the
// stored rows' indices, int64, strictly increasing, in [0, dense_shape[0]); `values` holds them,
// [rows, dense_shape[1], ...]. Every other row is zero.
class RowSparseTensor {
 public:
  RowSparseTensor() = default;
  // Checks everything and throws ErrorCode::InvalidArgument naming the first problem.
  static RowSparseTensor create(Shape dense_shape, Tensor rows, Tensor values);

  bool defined() const { return values_.defined(); }
  DType dtype() const { return values_.dtype(); }
  const Shape& dense_shape() const { return dense_shape_; }
  const Tensor& rows() const { return rows_; }
  const Tensor& values() const { return values_; }
  int64_t row_count() const { return rows_.numel(); }
  // The dense tensor (zeros where no row is stored).
  Tensor to_dense() const;

 private:
  Shape dense_shape_;
  Tensor rows_, values_;
};

// ---------------------------------------------------------------------------------------------
// A runtime value: a tensor, a sequence of tensors, a sparse CSR matrix, or an empty optional.
class Value {
 public:
  enum class Kind { None, Tensor, Sequence, Csr };

  Value() = default;                                               // empty optional
  Value(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {}  // NOLINT: implicit on purpose
  Value(CsrTensor c) : kind_(Kind::Csr), csr_(std::move(c)) {}     // NOLINT: implicit on purpose
  // (Copies and moves touch only the member the kind uses; the others are always empty.)
  Value(const Value& other);
  Value(Value&& other) noexcept;
  Value& operator=(const Value& other);
  Value& operator=(Value&& other) noexcept;
  ~Value() = default;
  static Value sequence(std::vector<Tensor> items, DType elem_type = DType::Undefined);
  static Value none() { return Value(); }

  Kind kind() const { return kind_; }
  bool is_tensor() const { return kind_ == Kind::Tensor; }
  bool is_sequence() const { return kind_ == Kind::Sequence; }
  bool is_csr() const { return kind_ == Kind::Csr; }
  bool is_none() const { return kind_ == Kind::None; }

  const Tensor& tensor() const;
  Tensor& tensor();
  const CsrTensor& csr() const;
  const std::vector<Tensor>& sequence_items() const;
  DType sequence_dtype() const { return seq_dtype_; }

 private:
  Kind kind_ = Kind::None;
  Tensor tensor_;
  CsrTensor csr_;
  std::vector<Tensor> items_;
  DType seq_dtype_ = DType::Undefined;
};

// ---------------------------------------------------------------------------------------------
// Model metadata.
struct Dim {
  int64_t value = -1;  // -1 when not a fixed number
  std::string symbol;  // the symbolic name, if any ("batch")
  bool is_fixed() const { return value >= 0; }
};

struct ValueInfo {
  std::string name;
  enum class Kind { Tensor, Sequence, Optional, SparseTensor, Other } kind = Kind::Tensor;
  DType dtype = DType::Undefined;  // element type (for sequences/optionals, of the tensors within)
  bool has_shape = false;          // false: rank unknown
  std::vector<Dim> shape;
  std::string describe() const;  // "float32[batch,784]"
};

using NamedValues = std::vector<std::pair<std::string, Value>>;

// What the model file says about itself.
struct ModelMetadata {
  int64_t ir_version = 0;
  std::string producer_name, producer_version;
  std::string domain;
  int64_t model_version = 0;
  std::string description;  // the model's doc_string
  std::string graph_name;
  std::string graph_description;              // the graph's doc_string
  std::map<std::string, int64_t> opsets;      // domain ("ai.onnx" for the default one) -> version
  std::map<std::string, std::string> custom;  // metadata_props
};

struct SessionOptions {
  int threads = 0;             // 0: one per core
  int optimization_level = 2;  // 0: none, 1: basic, 2: all
  std::string device = "cpu";
  std::string precision = "fp32";  // fp32 | bf16 | fp16 | int8 (CPU: weights quantized at load)
  // Bytes one run may hold in intermediates and outputs (the model's weights not counted). A run
  // that would pass it fails with ErrorCode::OutOfMemory before allocating. 0: the machine's
  // physical memory, so that a hostile shape is an error rather than an OOM kill.
  size_t memory_limit = 0;
  // Execution plans kept, one per distinct set of input shapes; least recently used evicted.
  size_t plan_cache_size = 64;
  // 3×3 stride-1 fp32 convolutions (with constant weights) by Winograd's algorithm where oneDNN
  // has it for this CPU: about half the multiplications, and results that differ from the
  // direct convolution in the last bits (ResNet-50: 1e-6 of the output's scale). false: direct
  // convolution only. Applies from optimization_level 2.
  bool winograd = true;
  // precision = int8 with a calibration batch (the model's inputs, as run() takes them): the
  // quantized layers' input ranges are measured on it once, at creation, and the layers chain in
  // 8 bits with those fixed scales (static quantization). Empty: activations are quantized
  // dynamically, each run, from their own range.
  NamedValues calibration;
};

// Lets another thread stop runs: pass it in RunOptions, call cancel() from anywhere. Runs
// check it between nodes and inside Loop/Scan iterations and end with ErrorCode::Cancelled.
class CancelToken {
 public:
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  void reset() noexcept { cancelled_.store(false, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

// Per-node timings of a run, in execution order (subgraph bodies' nodes included).
struct ProfileEvent {
  std::string node;     // the node's name (a fused node is named after what it fused)
  std::string op;       // its op type ("Densify" for the dense copy of a CSR input)
  std::string kernel;   // the implementation chosen ("dnnl_conv", "sparse_matmul", ...)
  double start_us = 0;  // since the run started
  double duration_us = 0;
  // Why the node ran a reference loop rather than a fast primitive; empty when it did not.
  std::string reference;
};
struct RunProfile {
  std::vector<ProfileEvent> events;
};

struct RunOptions {
  int64_t timeout_ms = 0;               // > 0: the run ends with ErrorCode::Timeout past this
  const CancelToken* cancel = nullptr;  // not owned; must outlive the run
  RunProfile* profile = nullptr;        // when set, the run appends one event per node run
};

class Session {
 public:
  explicit Session(const std::string& model_path, SessionOptions options = {});
  static Session from_bytes(const void* data, size_t size, SessionOptions options = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Graph inputs the caller must feed (initializers are not listed), and graph outputs.
  const std::vector<ValueInfo>& inputs() const;
  const std::vector<ValueInfo>& outputs() const;

  // Runs the model; safe to call from several threads at once. Returns the requested outputs
  // (all of them, in graph order, when `output_names` is empty).
  std::vector<Value> run(const NamedValues& inputs,
                         const std::vector<std::string>& output_names = {},
                         const RunOptions& run_options = {}) const;

  // Execution plans held now (at most SessionOptions::plan_cache_size).
  size_t cached_plans() const;
  const ModelMetadata& metadata() const;

  struct Impl;

 private:
  explicit Session(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------------
// Fine-tuning. Options are key/value strings (the C API's keys):
//   loss = cross_entropy | mse | model_output      prediction = output name (default: the first)
//   label = name of the label input (default "label")   optimizer = sgd | adam | adamw
//   learning_rate, momentum, nesterov, beta1, beta2, epsilon, weight_decay, max_grad_norm
//   trainable / freeze = comma-separated weight name prefixes (initializers, float Constant
//     outputs, weights inside If branches); by default every float constant with more than one
//     element that a gradient of the loss reaches
//   threads, device (cpu | cuda:N), precision (fp32 | mixed_fp16), seed
//   accumulate_steps = N: N calls of step() (micro-batches) per optimizer step, which applies
//     the mean of their gradients; a micro-batch that fails discards the ones summed so far
//   distributed = auto (default: MPI when started by mpirun) | off | mpi: data-parallel training,
//     one process per rank; each rank feeds its own shard (the same number of samples on every
//     rank) to step(), gradients are averaged across ranks, and every rank applies the same
//     update. Weights start from rank 0's; rank 0 alone writes checkpoints and exports.
//   sparse_allreduce_threshold = F (default 0.3): row-sparse gradients travel as rows while the
//     union of the ranks' rows covers at most F of the table, as a dense all-reduce past it
// device = cuda:N runs the forward and backward graphs there (ops without a CUDA kernel on the
// host, as in inference); weights, their optimizer state and the update stay on the host.
// precision = mixed_fp16 computes in fp16 from fp32 master weights with dynamic loss scaling. On
// a CUDA device that is tensor-core fp16; on the CPU the fp16 kernels are reference ones, much
// slower than fp32: there it is for checking how a model trains in fp16 before a GPU does it.
using TrainOptions = std::vector<std::pair<std::string, std::string>>;
// Throws volt::Error naming the first unknown key or bad value.
void validate_train_options(const TrainOptions& options);

class Trainer {
 public:
  explicit Trainer(const std::string& model_path, const TrainOptions& options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // One optimization step on a batch (model inputs and the label); returns the loss before
  // the update (the mean over ranks when distributed; with accumulate_steps = N, a step is one
  // micro-batch and every N-th applies the update). A non-finite loss or gradient skips the update
  // and throws, except that with precision=mixed_fp16 overflowing (scaled) gradients are the loss
  // scaler's signal: the step is skipped without an error, the scale halves, and skipped_steps()
  // counts it.
  float step(const NamedValues& batch);
  // The loss in evaluation mode (running statistics, no dropout); nothing changes.
  float evaluate(const NamedValues& batch) const;
  // The model's outputs in evaluation mode with the current weights.
  std::vector<Value> predict(const NamedValues& inputs) const;

  void set_learning_rate(float lr);
  float learning_rate() const;
  int64_t steps() const;  // optimizer steps applied
  // precision=mixed_fp16: the current loss scale (starts at 2^16, halves on overflow, doubles
  // after 2000 clean steps) and the steps skipped for overflow. 1 and 0 in fp32.
  float loss_scale() const;
  int64_t skipped_steps() const;
  // Data-parallel training: this process's rank and the number of ranks (0 and 1 alone), and
  // the bytes this rank handed to the exchange in the last optimizer step.
  int rank() const;
  int world_size() const;
  int64_t exchanged_bytes() const;
  const std::vector<std::string>& trainable() const;    // names of the weights being trained
  const Tensor& weight(const std::string& name) const;  // current value of an initializer

  // Weights, optimizer state, step and learning rate, written atomically (distributed: by rank
  // 0; the call does nothing on the others).
  void save_checkpoint(const std::string& path) const;
  // Refused (and nothing changes) when the checkpoint does not match the model. Distributed:
  // every rank calls it; rank 0 reads the file and every rank takes its contents.
  void load_checkpoint(const std::string& path);
  // A plain inference model with the tuned weights (distributed: written by rank 0).
  void export_model(const std::string& onnx_path) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace volt
