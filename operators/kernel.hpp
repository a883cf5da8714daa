// The kernel interface. A kernel is created per node from its attributes; at plan time it
// infers output types and shapes from concrete input shapes (and constant values where known)
// and may prepare state (a oneDNN primitive, reordered weights); at run time it computes.
#pragma once
#include <any>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/graph.hpp"
#include "volt/volt.hpp"

namespace volt {

// The type of a value as the planner knows it: kind, dtype and (when known) exact shape.
struct TypeShape {
  ValueInfo::Kind kind = ValueInfo::Kind::Tensor;
  DType dtype = DType::Undefined;
  Shape shape;
  bool shape_known = true;
  static TypeShape of(const Value& v);
};

// Whether two values have the same kind, dtype and shape (and both are known or both not).
inline bool same_type(const TypeShape& a, const TypeShape& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.shape_known == b.shape_known &&
         a.shape == b.shape;
}

// Thrown by InferContext::input() when an input's shape is only known at run time; the
// planner then defers the node's kernel choice and inference to the run.
struct ShapeUnknown {};

// Thrown by a kernel's infer() when it cannot handle this particular configuration, so that the
// planner falls back to the next kernel registered for the op (e.g. oneDNN -> reference).
struct KernelUnsupported {
  std::string reason;
};

class Kernel;
struct KernelDef;

// What a kernel keeps for one node across the plans of a session: state that serves every
// input shape (InferContext::shapes_vary), such as a oneDNN primitive with run-time dimensions
// and its packed weights, found again by a key the kernel makes of what the state depends on.
// It also keeps the node's kernel objects, one per kernel definition: a kernel is made from the
// node's attributes alone and is const, so every plan of the session shares it, and a new input
// shape does not parse the node's attributes again (nor compile an If's branches again).
class NodeMemo {
 public:
  // The kernel `definition` (a KernelDef, by address) makes for this node, made on first use.
  template <class Make>
  std::shared_ptr<const Kernel> kernel(const void* definition, Make&& make) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [d, k] : kernels_)
      if (d == definition) return k;
    kernels_.emplace_back(definition, std::shared_ptr<const Kernel>(make()));
    return kernels_.back().second;
  }
  // The kernel definitions the planner walks for this node on `device`, best first (those the
  // registry has for its op type that match its domain and opset there), listed by `list` on
  // first use: a new shape does not look the op up in the registry again.
  template <class List>
  const std::vector<const KernelDef*>& definitions(const std::string& device, List&& list) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [d, defs] : definitions_)
      if (d == device) return *defs;
    definitions_.emplace_back(device, std::make_unique<std::vector<const KernelDef*>>(list()));
    return *definitions_.back().second;
  }
  std::shared_ptr<void> find(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [k, state] : entries_)
      if (k == key) return state;
    return nullptr;
  }
  void keep(const std::string& key, std::shared_ptr<void> state) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMaxEntries) entries_.erase(entries_.begin());  // the oldest
    entries_.emplace_back(key, std::move(state));
  }
  // The planner's: the node's outputs where it folds from values no input shape changes (each
  // new shape asks, for every such node: a slot of its own, not a key compared with the
  // kernels' long descriptor keys).
  std::shared_ptr<const void> folded() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return folded_;
  }
  void keep_folded(std::shared_ptr<const void> outputs) {
    std::lock_guard<std::mutex> lock(mutex_);
    folded_ = std::move(outputs);
  }

 private:
  // (A MatMul has one entry per operand layout seen, a Conv one per bucket of widths.)
  static constexpr size_t kMaxEntries = 32;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, std::shared_ptr<void>>> entries_;
  std::vector<std::pair<const void*, std::shared_ptr<const Kernel>>> kernels_;
  std::shared_ptr<const void> folded_;
  // (Behind pointers: a list handed out stays where it is when another device's is added.)
  std::vector<std::pair<std::string, std::unique_ptr<std::vector<const KernelDef*>>>> definitions_;
};

// A kernel's copy of a constant input, and the way back to the input (keeps_copy_of_input).
// `exact`: the copy loses nothing and `restore` rebuilds every bit. A bf16 copy of fp32 weights
// (a product computed in bf16) is not exact: its `restore` rebuilds the weights rounded to bf16,
// which readers that round them to bf16 themselves cannot tell from the original (rounding to
// nearest even is idempotent). The planner drops an input only when every reader keeps a copy,
// and then rebuilds it from an exact copy if any reader has one.
struct CopyOfInput {
  std::function<Tensor()> restore;
  bool exact = true;
};

class InferContext {
 public:
  virtual ~InferContext() = default;
  virtual const Node& node() const = 0;
  virtual size_t input_count() const = 0;
  virtual bool has_input(size_t i) const = 0;
  virtual const TypeShape& input(size_t i) const = 0;
  // The input's content when known now (constants at plan time; everything at run time).
  virtual const Value* input_value(size_t i) const = 0;
  virtual size_t output_count() const = 0;
  virtual void set_output(size_t i, TypeShape t) = 0;
  // The output's content, when infer() can compute it from shapes alone (Shape, Size): the
  // planner then treats it as a constant.
  virtual void set_output_value(size_t i, Value v) = 0;
  virtual void set_state(std::shared_ptr<void> state) = 0;
  virtual void request_scratch(size_t bytes) = 0;
  virtual int threads() const = 0;
  // The kernel copied constant input i into its state (weights reordered for its primitive) and
  // its run() reads that input's shape only, never its data. `restore` rebuilds the input from
  // the kernel's copy: the planner may then drop the original, so that a model's weights are held
  // once rather than twice. See CopyOfInput for copies that round (fp32 -> bf16).
  virtual void keeps_copy_of_input(size_t i, CopyOfInput copy) = 0;
  // The kernel will run its reference loop for this configuration (no fast primitive took it):
  // profiles then name the node, so that a slow path on a real model shows at once.
  virtual void runs_reference_loop(const std::string& why) { (void)why; }
  // The model is being fed more than one input shape (this is not the first plan of its
  // session): kernels then prefer state that serves every shape (oneDNN primitives with run-time
  // dimensions) over state specialized for this one, so that a new shape costs a run, not the
  // code generation of a specialized primitive for each node.
  virtual bool shapes_vary() const { return false; }
  // The graph's inputs leave a dimension past the first open, so that it will likely be fed
  // several shapes, even where this is its first plan: state specialized to the first shape that
  // later plans cannot share is then best avoided.
  virtual bool shapes_may_vary() const { return shapes_vary(); }
  // This node's memo (see NodeMemo); null where plans are not kept for a session.
  virtual NodeMemo* memo() const { return nullptr; }
  // Asks for output 0 as a view of input 0 at these shapes (one contiguous run of it: a Gather
  // of one index, a Slice of whole trailing axes), which run() then sets with
  // RunContext::set_output. True where the planner places it so: it allocates nothing for it
  // and keeps input 0's buffer alive while the view is. False for a step whose shapes are known
  // only at run time (the buffers are laid out by then): run() writes the output it is given.
  // (Kernels whose output always views input 0, whatever the shapes, say so in
  // KernelDef::output_aliases_input, which holds for those steps too.)
  virtual bool output_views_input() { return false; }
  // Input i may be computed straight into output 0, at this byte offset (a Concat's part that is
  // one contiguous run of its output): the planner may place it there, and run() then finds its
  // data in place and copies nothing for it.
  virtual void input_may_live_in_output(size_t i, size_t byte_offset) {
    (void)i;
    (void)byte_offset;
  }

  // Helpers.
  const Tensor* input_tensor(size_t i) const {
    const Value* v = input_value(i);
    return v && v->is_tensor() ? &v->tensor() : nullptr;
  }
  const Shape& shape(size_t i) const { return input(i).shape; }
  DType dtype(size_t i) const { return input(i).dtype; }
  void set_output(size_t i, DType dtype, Shape shape) {
    set_output(i, TypeShape{ValueInfo::Kind::Tensor, dtype, std::move(shape), true});
  }
  void set_output_unknown(size_t i, DType dtype) {
    set_output(i, TypeShape{ValueInfo::Kind::Tensor, dtype, {}, false});
  }
  [[noreturn]] void error(const std::string& message) const {
    fail(ErrorCode::InvalidModel, node().describe() + ": " + message);
  }
  [[noreturn]] void input_error(const std::string& message) const {
    fail(ErrorCode::InvalidArgument, node().describe() + ": " + message);
  }
};

class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual const Node& node() const = 0;
  virtual size_t input_count() const = 0;
  virtual bool has_input(size_t i) const = 0;
  virtual const Value& input_value(size_t i) const = 0;
  virtual size_t output_count() const = 0;
  // The output the planner allocated (its shape is the one infer() set).
  virtual Tensor& output(size_t i) = 0;
  // For outputs whose shape infer() could not know: allocate now.
  virtual Tensor& allocate_output(size_t i, DType dtype, Shape shape) = 0;
  // For views of inputs, sequences and optionals.
  virtual void set_output(size_t i, Value v) = 0;
  virtual const void* state_ptr() const = 0;
  virtual void* scratch() const = 0;
  virtual int threads() const = 0;
  // The run's stream on the accelerator, for device kernels (nullptr on the host).
  virtual void* stream() const { return nullptr; }
  // Where the step runs: the accelerator for device kernels, else the host.
  virtual Device device() const { return Device{}; }

  // A value of an enclosing graph that this node's subgraphs capture (nullptr if none).
  virtual const Value* captured(const std::string& name) const = 0;

  const Tensor& input(size_t i) const { return input_value(i).tensor(); }
  bool has_output(size_t i) const { return node().has_output(i); }
  template <class T>
  const T& state() const {
    return *static_cast<const T*>(state_ptr());
  }
  [[noreturn]] void error(const std::string& message) const {
    fail(ErrorCode::Runtime, node().describe() + ": " + message);
  }
  // Values the caller fed that the op refuses (an index out of range): InferContext's
  // input_error, for what only the run sees.
  [[noreturn]] void input_error(const std::string& message) const {
    fail(ErrorCode::InvalidArgument, node().describe() + ": " + message);
  }
};

// A node's graph attribute (If branches, Loop and Scan bodies), ready to run. Made by
// make_subgraph (runtime/subgraph.cpp); plans are cached per input signature like the main graph's.
class Subgraph {
 public:
  virtual ~Subgraph() = default;
  virtual size_t input_count() const = 0;
  virtual size_t output_count() const = 0;
  // Runs the body on its inputs (in order); values it reads from enclosing graphs come from
  // `ctx.captured()`. The outputs are owned by the caller.
  virtual std::vector<Value> run(const std::vector<Value>& inputs, const RunContext& ctx) const = 0;
};
std::unique_ptr<Subgraph> make_subgraph(std::shared_ptr<const Graph> body, const Node& owner);

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void infer(InferContext& ctx) const = 0;
  virtual void run(RunContext& ctx) const = 0;
};

}  // namespace volt
