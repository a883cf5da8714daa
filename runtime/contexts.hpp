// The concrete InferContext and RunContext used by the planner and the executor.
#pragma once
#include <span>
#include <vector>

#include "operators/kernel.hpp"
#include "runtime/tensor_alloc.hpp"

namespace volt {

class NodeInferContext final : public InferContext {
 public:
  // `inputs` and `values` are the caller's and must outlive the context (their elements, not
  // the vectors: a vector moved elsewhere keeps them). A new shape plans every node through one
  // of these, so it copies nothing and allocates only the output types.
  NodeInferContext(const Node& node, std::span<const TypeShape* const> inputs,
                   std::span<const Value* const> values, int threads, bool shapes_vary = false,
                   NodeMemo* memo = nullptr, bool shapes_may_vary = false)
      : node_(node),
        inputs_(inputs),
        values_(values),
        threads_(threads),
        shapes_vary_(shapes_vary),
        shapes_may_vary_(shapes_vary || shapes_may_vary),
        memo_(memo) {
    // (An output no set_output() reaches stays unknown: shape_known false.)
    outputs.assign(node.outputs.size(),
                   TypeShape{ValueInfo::Kind::Tensor, DType::Undefined, {}, false});
  }
  const Node& node() const override { return node_; }
  size_t input_count() const override { return inputs_.size(); }
  bool has_input(size_t i) const override { return i < inputs_.size() && inputs_[i] != nullptr; }
  const TypeShape& input(size_t i) const override {
    if (!has_input(i))
      fail(ErrorCode::InvalidModel,
           node_.describe() + ": required input " + std::to_string(i) + " is missing");
    if (!inputs_[i]->shape_known) throw ShapeUnknown{};
    return *inputs_[i];
  }
  const Value* input_value(size_t i) const override {
    if (i < 64)
      values_read |= uint64_t{1} << i;
    else
      values_read_beyond = true;
    return i < values_.size() ? values_[i] : nullptr;
  }
  size_t output_count() const override { return outputs.size(); }
  void set_output(size_t i, TypeShape t) override {
    if (i >= outputs.size()) return;  // an output the node does not name
    outputs[i] = std::move(t);
  }
  void set_output_value(size_t i, Value v) override {
    if (i >= outputs.size()) return;
    set_output(i, TypeShape::of(v));
    output_values.resize(outputs.size());
    output_values[i] = std::move(v);
    if (output_values[i].is_none()) output_values[i] = Value::none();
    has_values = true;
  }
  void set_state(std::shared_ptr<void> s) override { state = std::move(s); }
  void request_scratch(size_t bytes) override { scratch_bytes = std::max(scratch_bytes, bytes); }
  int threads() const override { return threads_; }
  bool shapes_vary() const override { return shapes_vary_; }
  bool shapes_may_vary() const override { return shapes_may_vary_; }
  NodeMemo* memo() const override { return memo_; }
  bool output_views_input() override {
    output_is_view = views_allowed;
    return views_allowed;
  }
  void input_may_live_in_output(size_t i, size_t byte_offset) override {
    inputs_in_output.emplace_back(static_cast<int>(i), byte_offset);
  }
  void keeps_copy_of_input(size_t i, CopyOfInput copy) override {
    if (i >= restorers.size()) restorers.resize(i + 1);
    restorers[i] = std::move(copy);
  }

  void runs_reference_loop(const std::string& why) override {
    reference = why.empty() ? "reference" : why;
  }

  // Whether every output's type and shape are known now.
  bool all_known() const {
    for (const TypeShape& t : outputs)
      if (!t.shape_known) return false;
    return true;
  }

  std::vector<TypeShape> outputs;
  std::vector<Value> output_values;  // empty unless has_values
  bool has_values = false;
  // At run time (the executor's contexts): only where input 0 outlives the run (a fed input,
  // a heap value, a constant), the arena being laid out already.
  bool views_allowed = true;
  bool output_is_view = false;  // see output_views_input
  std::vector<std::pair<int, size_t>> inputs_in_output;  // see input_may_live_in_output
  std::shared_ptr<void> state;
  size_t scratch_bytes = 0;
  std::string reference;  // why the kernel runs its reference loop; empty on a fast path
  // The inputs whose values infer() asked for (bit i: input i; past 64, values_read_beyond):
  // what a run-time choice depends on beside the types (DeferredChoices).
  mutable uint64_t values_read = 0;
  mutable bool values_read_beyond = false;
  std::vector<CopyOfInput> restorers;  // by input: see keeps_copy_of_input

 private:
  const Node& node_;
  std::span<const TypeShape* const> inputs_;
  std::span<const Value* const> values_;
  int threads_;
  bool shapes_vary_, shapes_may_vary_;
  NodeMemo* memo_;
};

class NodeRunContext final : public RunContext {
 public:
  // `captured`: the values of enclosing graphs this node's subgraphs read, by name.
  using Captured = std::vector<std::pair<const std::string*, const Value*>>;
  // `inputs` and `outputs` are the caller's and must outlive the context (one per step: no copy).
  NodeRunContext(const Node& node, std::span<const Value* const> inputs,
                 std::span<Value* const> outputs, std::vector<char>* fresh, const void* state,
                 void* scratch, int threads, const Captured* captured = nullptr)
      : node_(node),
        inputs_(inputs),
        outputs_(outputs),
        fresh_(fresh),
        state_(state),
        scratch_(scratch),
        threads_(threads),
        captured_(captured) {}
  const Node& node() const override { return node_; }
  size_t input_count() const override { return inputs_.size(); }
  bool has_input(size_t i) const override { return i < inputs_.size() && inputs_[i] != nullptr; }
  const Value& input_value(size_t i) const override {
    if (!has_input(i))
      fail(ErrorCode::InvalidModel,
           node_.describe() + ": required input " + std::to_string(i) + " is missing");
    return *inputs_[i];
  }
  size_t output_count() const override { return outputs_.size(); }
  Tensor& output(size_t i) override {
    Value* v = slot(i);
    if (!v->is_tensor() || !v->tensor().defined())
      error("output " + std::to_string(i) + " was not allocated");
    return v->tensor();
  }
  Tensor& allocate_output(size_t i, DType dtype, Shape shape) override {
    Value* v = slot(i);
    *v = device_.is_cpu() ? allocate_tensor(dtype, std::move(shape))
                          : allocate_on_device(device_, dtype, std::move(shape), stream_);
    if (fresh_) (*fresh_)[i] = 1;
    return v->tensor();
  }
  void set_output(size_t i, Value value) override {
    if (i >= outputs_.size() || !outputs_[i]) return;
    *outputs_[i] = std::move(value);
    if (fresh_) (*fresh_)[i] = 0;
  }
  const void* state_ptr() const override { return state_; }
  void* scratch() const override { return scratch_; }
  int threads() const override { return threads_; }
  void* stream() const override { return stream_; }
  Device device() const override { return device_; }
  // A node on an accelerator: where allocate_output() allocates, and the run's stream there.
  void place_on(Device device, void* stream) {
    device_ = device;
    stream_ = stream;
  }
  const Value* captured(const std::string& name) const override {
    if (captured_)
      for (const auto& [n, v] : *captured_)
        if (*n == name) return v;
    return nullptr;
  }

 private:
  Value* slot(size_t i) {
    if (i >= outputs_.size() || !outputs_[i]) {
      // An omitted optional output: give the kernel a scratch slot to write into.
      if (i >= spare_.size()) spare_.resize(i + 1);
      return &spare_[i];
    }
    return outputs_[i];
  }
  const Node& node_;
  std::span<const Value* const> inputs_;
  std::span<Value* const> outputs_;
  std::vector<char>* fresh_;
  const void* state_;
  void* scratch_;
  int threads_;
  const Captured* captured_;
  Device device_;
  void* stream_ = nullptr;
  std::vector<Value> spare_;
};

}  // namespace volt
