// Session: load, optimize, compile once; per run, validate inputs, find the plan for their
// shapes, execute.
#include <omp.h>

#include <algorithm>
#include <thread>

#include "loaders/loader.hpp"
#include "operators/common/gemm_warmup.hpp"
#include "runtime/buffer_pool.hpp"
#include "runtime/calibration.hpp"
#include "runtime/device.hpp"
#include "runtime/feeds.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/run_control.hpp"
#include "runtime/session_impl.hpp"

namespace volt {

// --- session
// -----------------------------------------------------------------------------------------
namespace {

int resolve_threads(int requested) {
  VOLT_CHECK(requested >= 0, InvalidArgument,
             "threads must be >= 0, got " + std::to_string(requested));
  return requested > 0 ? requested : omp_get_num_procs();
}

void check_options(const SessionOptions& o) {
  VOLT_CHECK(o.optimization_level >= 0 && o.optimization_level <= 2, InvalidArgument,
             "optimization_level must be 0, 1 or 2, got " + std::to_string(o.optimization_level));
  const Device device = Device::parse(o.device);
  if (!device.is_cpu()) require_device(device);
  VOLT_CHECK(o.plan_cache_size >= 1, InvalidArgument, "plan_cache_size must be at least 1");
  if (device.is_cpu())
    VOLT_CHECK(o.precision == "fp32" || o.precision == "bf16" || o.precision == "int8",
               NotImplemented,
               "precision '" + o.precision + "' is not supported on cpu (use fp32, bf16 or int8)");
  else
    VOLT_CHECK(
        o.precision == "fp32" || o.precision == "fp16", NotImplemented,
        "precision '" + o.precision + "' is not supported on " + o.device + " (use fp32 or fp16)");
}

// Whether the model will multiply matrices in fp32 on the CPU on oneDNN's gemm, whose code is
// then best made while the model loads (operators/common/gemm_warmup.hpp): models fed several
// shapes, whose later plans multiply on it on any CPU; and without AVX-512, models whose MatMuls
// may multiply two computed values (attention's; products with constant weights run as 1x1
// convolutions there, cpu/matmul.cpp's ConvRoute) and whose load takes about as long as the code
// anyway: the session waits for the code before it is handed out, and a small model's load
// (6 KB: 15-20 ms, most of it the ONNX schema registry) would wait 10-30 ms for it.
bool needs_gemm_code(const ParsedModel& parsed, const SessionOptions& o) {
  constexpr int64_t kMinWeightElements = int64_t{1} << 21;  // 8 MiB of fp32
  if (o.device != "cpu" || o.precision != "fp32" ||
      !(parsed.op_types.count("MatMul") || parsed.op_types.count("Gemm")))
    return false;
  return products_need_gemm_code(parsed.input_dims_vary) &&
         (parsed.input_dims_vary ||
          (parsed.op_types.count("MatMul") && parsed.weight_elements >= kMinWeightElements));
}

// A session on the model `load` returns (a loader taking an OnParsed), with oneDNN's gemm code
// made meanwhile where the parsed model needs it. The session is handed out once that code is
// made: a thread still making it when the process ends runs into oneDNN's kernels as exit
// destroys them (a session kept in a static, the fuzz replay's, crashed 1 run in 2 under load
// when its destructor joined the thread there).
template <class Load>
std::shared_ptr<Session::Impl> load_session(const Load& load, SessionOptions options) {
  keep_freed_memory();       // (before loading: see keep_freed_memory)
  std::jthread gemm_warmup;  // (joined as this returns)
  Model model = load([&](const ParsedModel& parsed) {
    if (needs_gemm_code(parsed, options)) gemm_warmup = start_gemm_warmup();
  });
  return std::make_shared<Session::Impl>(std::move(model), std::move(options));
}

}  // namespace

Session::Impl::Impl(Model m, SessionOptions o) : options(std::move(o)), model(std::move(m)) {
  check_options(options);
  Graph optimized =
      options.precision == "int8" && !options.calibration.empty()
          ? run_passes(quantize_static(model.graph, calibrate(model, options)), options)
          : run_passes(model.graph, options);
  const Device device = Device::parse(options.device);
  if (!device.is_cpu()) optimized = place_on_device(optimized, device);
  runner = GraphRunner::owning(std::make_shared<Graph>(std::move(optimized)), model.source,
                               options.device, resolve_threads(options.threads),
                               options.plan_cache_size);
  for (const auto& v : model.graph.inputs)
    if (!model.graph.is_initializer(v.name)) inputs.push_back(v);
  outputs = model.graph.outputs;
  metadata = {.ir_version = model.ir_version,
              .producer_name = model.producer_name,
              .producer_version = model.producer_version,
              .domain = model.domain,
              .model_version = model.model_version,
              .description = model.doc_string,
              .graph_name = model.graph.name,
              .graph_description = model.graph_doc_string,
              .opsets = model.opsets,
              .custom = model.metadata_props};
  // The runner's graph has every weight the session needs (and may drop those its plans keep
  // copies of): the loaded model's own references would hold them all a second time.
  model.graph.initializers.clear();
  model.graph.sparse_initializers.clear();
}

std::vector<Value> Session::Impl::run(const NamedValues& feeds,
                                      const std::vector<std::string>& output_names,
                                      const RunOptions& run_options) {
  const RunControl control(run_options, options.memory_limit);
  const ScopedRunControl installed(&control);
  std::vector<Value> empties;
  const std::vector<const Value*> fed =
      bind_feeds(runner->compiled(), feeds, model.source, empties);
  std::vector<Value> all = runner->run(fed);
  if (output_names.empty()) return all;
  std::vector<Value> picked;
  for (const auto& name : output_names) {
    auto it = std::find_if(outputs.begin(), outputs.end(),
                           [&](const ValueInfo& v) { return v.name == name; });
    VOLT_CHECK(it != outputs.end(), InvalidArgument,
               model.source + ": unknown output '" + name + "'");
    picked.push_back(all[static_cast<size_t>(it - outputs.begin())]);
  }
  return picked;
}

// --- public API
// ----------------------------------------------------------------------------------------
Session::Session(const std::string& model_path, SessionOptions options)
    : impl_(as_volt_error([&] {
        return load_session(
            [&](const OnParsed& on_parsed) { return load_model(model_path, on_parsed); },
            std::move(options));
      })) {}
Session::Session(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session Session::from_bytes(const void* data, size_t size, SessionOptions options) {
  return Session(as_volt_error([&] {
    return load_session(
        [&](const OnParsed& on_parsed) {
          return load_model_from_bytes(data, size, "<memory>", "", on_parsed);
        },
        std::move(options));
  }));
}
Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
const std::vector<ValueInfo>& Session::inputs() const {
  return impl_->inputs;
}
const std::vector<ValueInfo>& Session::outputs() const {
  return impl_->outputs;
}
std::vector<Value> Session::run(const NamedValues& inputs,
                                const std::vector<std::string>& output_names,
                                const RunOptions& run_options) const {
  return as_volt_error([&] { return impl_->run(inputs, output_names, run_options); });
}

size_t Session::cached_plans() const {
  return impl_->runner->cached_plans();
}
const ModelMetadata& Session::metadata() const {
  return impl_->metadata;
}

}  // namespace volt
