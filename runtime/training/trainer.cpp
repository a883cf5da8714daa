// Trainer: the model's graph plus a loss, differentiated with respect to the trainable
// initializers; each step runs forward and backward as one planned graph, then the optimizer
// updates the weights in place. Evaluation and prediction run the inference graph with the
// current weights.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "loaders/loader.hpp"
#include "operators/common/convert.hpp"
#include "operators/common/simd_clones.hpp"
#include "operators/grad/gradient_rule.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/feeds.hpp"
#include "runtime/graph_runner.hpp"
#include "runtime/omp_threads.hpp"
#include "runtime/passes/passes.hpp"
#include "runtime/plan.hpp"
#include "runtime/training/autodiff.hpp"
#include "runtime/training/checkpoint.hpp"
#include "runtime/training/communicator.hpp"
#include "runtime/training/gradient_exchange.hpp"
#include "runtime/training/loss_scaler.hpp"
#include "runtime/training/optimizer.hpp"
#include "runtime/training/parameters.hpp"
#include "runtime/training/train_config.hpp"

namespace volt {
namespace {

bool is_float(DType t) {
  return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16;
}

bool has_prefix(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

// Σ p[i]², accumulated in double (a gradient's squares span more range than a float sum keeps).
// Sixteen independent partial sums, so that the additions (which may not be reordered) still
// fill vector registers.
VOLT_SIMD_CLONES double sum_of_squares_f32(const float* p, int64_t n) {
  double acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      acc[j] += static_cast<double>(p[i + j]) * static_cast<double>(p[i + j]);
  double s = 0;
  for (; i < n; ++i) s += static_cast<double>(p[i]) * static_cast<double>(p[i]);
  for (double a : acc) s += a;
  return s;
}

// precision=mixed_fp16: the graph input that carries the loss scale (the seed of the backward
// pass), and where a checkpoint keeps the scaler's state.
const std::string kLossScaleInput = "volt/loss_scale";
const std::string kScaleKey = "loss_scaler/scale", kCleanStepsKey = "loss_scaler/clean_steps",
                  kSkippedKey = "loss_scaler/skipped_steps";

// Gradients go across ranks in buckets of about this size: big enough that a bucket's
// all-reduce costs more than starting one, small enough that the first ones start early in the
// backward pass.
constexpr size_t kBucketBytes = size_t{4} << 20;

// FNV-1a over 8-byte words (and the tail by bytes): the model file's fingerprint, which the ranks
// compare.
uint64_t fingerprint(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < s.size(); ++i) h = (h ^ static_cast<unsigned char>(s[i])) * 1099511628211ull;
  return h;
}

}  // namespace

struct Trainer::Impl {
  TrainConfig cfg;
  Model model;
  std::string model_bytes;  // the original file, for export
  std::string prediction;
  std::vector<std::string> trainable;
  std::map<std::string, Tensor>
      weights;  // every float initializer (trained or not), owned and updated in place
  std::map<std::string, Value> weight_values;
  std::map<std::string, DType> stored_dtype;  // weights the file holds in fp16, trained in fp32
  std::map<std::string, std::string>
      running_stats;  // training-graph output -> the initializer it updates
  // The forward and backward graph, one per set of inputs fed as CSR matrices (their weights'
  // gradients are row-sparse); the all-dense one is built with the trainer.
  struct TrainGraph {
    std::unique_ptr<GraphRunner> runner;
    std::vector<std::string> dense;   // weights whose gradients come as one tensor each, in order
    std::vector<std::string> sparse;  // then weights whose gradients come as (rows, values)
    uint64_t key = 0;                 // which inputs come as CSR (the ranks compare it)
    // With accumulation or several ranks: where the dense gradients are summed (made on the
    // first such step, in the order the plan produces them), and each one's slot there.
    std::unique_ptr<DenseGradientBuckets> buckets;
    std::vector<size_t> slot_of;
  };
  std::map<std::set<std::string>, TrainGraph> train_graphs;
  std::unique_ptr<GraphRunner> eval, infer;
  Optimizer optimizer;
  double lr;
  int64_t step = 0;  // optimizer steps applied (Adam's t); skipped steps do not count
  // Where the graphs run: nodes with a kernel on the device run there, the rest on the host
  // (place_on_device). The weights, their fp32 masters and the optimizer stay on the host; each
  // step uploads the weights once and brings the gradients back.
  Device device;
  // precision=mixed_fp16: the graphs compute in fp16 from fp32 master weights (cast each run),
  // the loss and its gradient in fp32; the backward pass starts from the loss scale, and the
  // gradients are unscaled (in fp32, before clipping and weight decay) and checked here.
  bool mixed = false;
  LossScaler scaler;
  // Data-parallel training: the other ranks (nullptr for one process). With it, or with
  // accumulate_steps > 1, steps go through accumulate_step().
  std::unique_ptr<Communicator> comm;
  int micro = 0;                             // micro-batches summed toward the next update
  const TrainGraph* accumulating = nullptr;  // the graph they ran
  std::vector<std::vector<RowSparseTensor>> pending_rows;  // per table, per micro-batch
  uint64_t step_bytes_start = 0, last_step_bytes = 0;
  RowExchangeBuffers row_exchange;
  mutable std::mutex mutex;

  Impl(const std::string& path, const TrainOptions& options)
      : cfg(parse_train_options(options)),
        optimizer(cfg),
        lr(cfg.learning_rate),
        device(Device::parse(cfg.device)),
        mixed(cfg.precision == "mixed_fp16") {
    comm = open_communicator(cfg.distributed);
    if (!comm) {
      build(path);
      return;
    }
    // Every rank builds; all fail together if one does, then they check that they run one job
    // and start from rank 0's weights.
    std::string error;
    ErrorCode code = ErrorCode::Runtime;
    try {
      build(path);
    } catch (const Error& e) {
      error = e.what();
      code = e.code();
    }
    agree(error, code, path + ": creating the trainer", {});
    check_same_job(path);
    for (auto& [name, t] : weights) comm->broadcast(t.raw(), t.nbytes(), 0);
    round_stored();
  }

  void build(const std::string& path) {
    if (!device.is_cpu()) require_device(device);
    model_bytes = read_file_bytes(path);
    model = load_model(path);
    const Graph& g = model.graph;
    VOLT_CHECK(!g.outputs.empty(), InvalidModel, path + ": the model has no outputs");
    prediction = cfg.prediction.empty() ? g.outputs[0].name : cfg.prediction;
    bool found = false;
    for (const auto& o : g.outputs) found = found || o.name == prediction;
    VOLT_CHECK(
        found, InvalidArgument,
        path + ": training option 'prediction': the model has no output '" + prediction + "'");
    for (const auto& v : g.inputs)
      VOLT_CHECK(v.name != cfg.label || cfg.loss == "model_output", InvalidArgument,
                 path + ": the label input '" + cfg.label +
                     "' collides with a model input; set the 'label' option");

    if (const Node* q = first_quantized_node(g))
      fail(ErrorCode::InvalidArgument,
           path + ": " + q->describe() + ": the model is quantized (" + q->op_type +
               "), and a quantized model cannot be fine-tuned; fine-tune the float model, then "
               "quantize it");
    lift_parameters(model.graph, cfg.trainable);
    // A model stored in fp16 trains in fp32 on the CPU, as it runs there (compute_fp16_in_fp32):
    // its weights become fp32 masters (exactly), the optimizer works in fp32, and the export
    // writes them back in fp16. (On a device, 16-bit weights keep their type; the optimizer
    // updates them through fp32 copies.)
    if (device.is_cpu() && !mixed) {
      for (const auto& [name, t] : model.graph.initializers)
        if (t.dtype() == DType::Float16) stored_dtype[name] = t.dtype();
      if (!stored_dtype.empty()) model.graph = compute_fp16_in_fp32(model.graph);
    }
    for (auto& [name, t] : model.graph.initializers) {
      if (!is_float(t.dtype())) continue;
      weights[name] = t.clone();
      // The graph shares the trained copy (every run feeds it anyway), so the loaded one, often
      // a view of the mapped weights file, is released: one copy of each table, not two.
      t = weights[name];
      weight_values[name] = weights[name];
    }
    round_stored();  // (exact here: the values came from fp16)
    choose_trainable(path);
    for (const auto& name : trainable)
      VOLT_CHECK(!mixed || weights.at(name).dtype() == DType::Float, InvalidArgument,
                 path + ": precision mixed_fp16 keeps fp32 master weights, and '" + name + "' is " +
                     dtype_name(weights.at(name).dtype()) + " (freeze it, or train in fp32)");

    // Inference graph.
    infer = runner(in_precision(g));
    // Evaluation: inference graph + loss.
    Graph ev = in_precision(g);
    const std::string eval_loss = add_loss(ev);
    ev.outputs = {output_info(eval_loss)};
    eval = runner(std::move(ev));
    train_graphs[{}] = build_training({});
  }

  // The weights to train. By default every float constant with more than one element through
  // which a gradient reaches the loss (not shapes, indices, scales of Resize, running
  // statistics); with `trainable` / `freeze` prefixes, the ones they choose, each of which must
  // get a gradient: a chosen weight the loss does not depend on, or only through values
  // without a gradient, is an error rather than a weight that silently never moves.
  void choose_trainable(const std::string& path) {
    Graph tr = model.graph;
    to_training_mode(tr);
    const std::string loss = add_loss(tr);
    const GradientReach reach = gradient_reach(tr, loss);
    std::set<std::string> statistics;  // updated by the steps, not by gradients
    for (const auto& [_, init] : running_stats) statistics.insert(init);
    for (const auto& [name, t] : weights) {
      if (statistics.count(name)) continue;
      const bool chosen = cfg.trainable.empty() ? default_parameter_size(t.numel())
                                                : has_prefix(name, cfg.trainable);
      if (!chosen || has_prefix(name, cfg.freeze)) continue;
      if (reach.differentiable.count(name)) {
        trainable.push_back(name);
        continue;
      }
      if (cfg.trainable.empty()) continue;  // the default takes only what can learn
      fail(ErrorCode::InvalidArgument,
           path + ": trainable weight '" + name + "' " +
               (reach.reaches.count(name)
                    ? "reaches the loss only through inputs that carry no gradient (" +
                          gradient_cuts(tr, loss, name) + ")"
                    : "does not affect the loss (read by " + readers_of(tr, name) + ")") +
               "; freeze it or leave it out of 'trainable'");
    }
    VOLT_CHECK(!trainable.empty(), InvalidArgument,
               path +
                   ": no float weight matches the trainable/freeze options and gets a gradient "
                   "of the loss; nothing to train");
  }

  // The nodes that read `value` (in the graph or in its subgraphs), for messages.
  static std::string readers_of(const Graph& g, const std::string& value) {
    std::string out;
    for (const Node& n : g.nodes) {
      bool reads = std::find(n.inputs.begin(), n.inputs.end(), value) != n.inputs.end();
      for (const auto& [_, a] : n.attributes) {
        std::vector<std::shared_ptr<Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (const auto& sg : subs) {
          const auto free = free_values(*sg);
          reads = reads || std::find(free.begin(), free.end(), value) != free.end();
        }
      }
      if (reads) out += (out.empty() ? "" : ", ") + n.describe();
    }
    return out.empty() ? "no node" : out;
  }

  // The model's forward graph in the training precision: with mixed_fp16, fp16 compute from fp32
  // weights and inputs, its float outputs back in fp32 (so the loss is computed in fp32).
  Graph in_precision(const Graph& g) const {
    return mixed ? use_fp16(g, Fp16Weights::CastEachRun) : g;
  }

  std::unique_ptr<GraphRunner> runner(Graph g) const {
    if (!device.is_cpu()) g = place_on_device(g, device);
    return std::make_unique<GraphRunner>(std::make_shared<const Graph>(std::move(g)), model.source,
                                         cfg.device, cfg.threads);
  }

  // The backward pass's seed: the loss scale, shaped and typed like the loss.
  static std::string add_loss_scale_seed(Graph& g, const std::string& loss) {
    ValueInfo scale;
    scale.name = kLossScaleInput;
    scale.dtype = DType::Float;
    scale.has_shape = true;  // a scalar
    g.inputs.push_back(scale);
    Node like = make_node("volt/loss_scale_like", "CastLike", {kLossScaleInput, loss},
                          {"volt/loss_scale_like"});
    like.opset = 15;
    g.nodes.push_back(std::move(like));
    g.nodes.push_back(make_node("volt/loss_shape", "Shape", {loss}, {"volt/loss_shape"}));
    g.nodes.push_back(make_node("volt/loss_seed", "Expand",
                                {"volt/loss_scale_like", "volt/loss_shape"}, {"volt/loss_seed"}));
    return "volt/loss_seed";
  }

  // A weight read once, as W in MatMul(X, W) or Gemm(X, W) (no transposes), where X is one of
  // the inputs fed as CSR: its (X, Y, alpha).
  struct CsrRead {
    std::string x, y;
    float alpha = 1.0f;
  };
  static std::optional<CsrRead> csr_matmul_read(const Graph& g, const std::string& w,
                                                const std::set<std::string>& csr_inputs) {
    std::optional<CsrRead> read;
    for (const auto& o : g.outputs)
      if (o.name == w) return std::nullopt;
    for (const Node& n : g.nodes) {
      for (const auto& [_, a] : n.attributes)
        if (a.g || !a.graphs.empty()) return std::nullopt;  // subgraphs: not worth the analysis
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != w) continue;
        const bool matmul =
            n.domain == kOnnxDomain && i == 1 && n.has_output(0) && csr_inputs.count(n.inputs[0]) &&
            (n.op_type == "MatMul" ||
             (n.op_type == "Gemm" && n.attr_int("transA", 0) == 0 && n.attr_int("transB", 0) == 0));
        if (!matmul || read) return std::nullopt;
        read = CsrRead{n.inputs[0], n.outputs[0],
                       n.op_type == "Gemm" ? n.attr_float("alpha", 1.0f) : 1.0f};
      }
    }
    return read;
  }

  // Training: training-mode ops + loss + gradients. Embedding tables get row-sparse gradients:
  // autodiff stops at the rows they gathered, and one RowSparseGrad node per table collects
  // them. So do weights multiplied by a CSR input: autodiff stops at the product, and
  // CsrWeightGrad takes the rows the input's non-zeros select.
  TrainGraph build_training(const std::set<std::string>& csr_inputs) {
    Graph tr = model.graph;
    to_training_mode(tr);
    tr = in_precision(tr);
    const std::string loss = add_loss(tr);
    TrainGraph out;
    std::map<std::string, std::vector<std::pair<std::string, std::string>>> lookups;
    std::map<std::string, CsrRead> csr_reads;
    std::vector<std::string> tables, csr_weights;
    for (const auto& name : trainable) {
      auto reads = cfg.sparse_gradients ? gather_only_reads(tr, name) : std::nullopt;
      auto csr = cfg.sparse_gradients && weights.at(name).rank() == 2
                     ? csr_matmul_read(tr, name, csr_inputs)
                     : std::nullopt;
      if (reads && !reads->empty()) {
        tables.push_back(name);
        lookups[name] = *reads;
      } else if (csr) {
        csr_weights.push_back(name);
        csr_reads[name] = *csr;
      } else {
        out.dense.push_back(name);
      }
    }
    std::vector<std::string> wrt = out.dense;
    for (const auto& table : tables)
      for (const auto& [ids, rows] : lookups[table]) wrt.push_back(rows);
    for (const auto& w : csr_weights) wrt.push_back(csr_reads[w].y);
    const std::string seed = mixed ? add_loss_scale_seed(tr, loss) : "";
    const std::vector<std::string> grad_names =
        append_gradients(tr, {loss, seed, wrt}, model.source);
    tr.outputs = {output_info(loss)};
    for (size_t i = 0; i < out.dense.size(); ++i) tr.outputs.push_back(output_info(grad_names[i]));
    size_t next = out.dense.size();
    auto collect = [&](const std::string& w, const std::string& op) -> Node& {
      Node& n = tr.nodes.emplace_back(
          make_node("volt/" + op + "/" + w, op, {}, {w + "/grad_rows", w + "/grad_values"}));
      n.domain = kVoltDomain;
      n.opset = 1;
      tr.outputs.push_back(output_info(w + "/grad_rows"));
      tr.outputs.push_back(output_info(w + "/grad_values"));
      out.sparse.push_back(w);
      return n;
    };
    for (const auto& table : tables) {
      Node& n = collect(table, "RowSparseGrad");
      n.attributes["table_rows"] = int_attr(weights.at(table).dim(0));
      for (const auto& [ids, rows] : lookups[table]) {
        n.inputs.push_back(ids);
        n.inputs.push_back(grad_names[next++]);
      }
    }
    for (const auto& w : csr_weights) {
      Node& n = collect(w, "CsrWeightGrad");
      n.inputs = {csr_reads[w].x, grad_names[next++]};
      n.attributes["alpha"] = float_attr(csr_reads[w].alpha);
    }
    for (const auto& [o, _] : running_stats) tr.outputs.push_back(output_info(o));
    out.runner = runner(std::move(tr));
    std::string names;
    for (const auto& c : csr_inputs) names += c + '\n';
    out.key = fingerprint(names);
    return out;
  }

  // When every read of `table` in `g` is a Gather on axis 0 with the table as data: the
  // (ids, gathered rows) of each; otherwise nothing (the table gets a dense gradient).
  static std::optional<std::vector<std::pair<std::string, std::string>>> gather_only_reads(
      const Graph& g, const std::string& table) {
    std::vector<std::pair<std::string, std::string>> reads;
    for (const auto& o : g.outputs)
      if (o.name == table) return std::nullopt;
    for (const Node& n : g.nodes) {
      for (const auto& [_, a] : n.attributes) {
        std::vector<std::shared_ptr<Graph>> subs = a.graphs;
        if (a.g) subs.push_back(a.g);
        for (const auto& sg : subs) {
          const auto free = free_values(*sg);
          if (std::find(free.begin(), free.end(), table) != free.end()) return std::nullopt;
        }
      }
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i] != table) continue;
        const bool gather = n.op_type == "Gather" && n.domain == kOnnxDomain && i == 0 &&
                            n.attr_int("axis", 0) == 0 && n.has_output(0);
        if (!gather) return std::nullopt;
        reads.emplace_back(n.inputs[1], n.outputs[0]);
      }
    }
    return reads;
  }

  static ValueInfo output_info(const std::string& name) {
    ValueInfo v;
    v.name = name;
    return v;
  }

  // Adds the label input and the loss nodes; returns the loss value's name.
  std::string add_loss(Graph& g) const {
    if (cfg.loss == "model_output") return prediction;
    ValueInfo label;
    label.name = cfg.label;
    DType predicted = DType::Undefined;
    for (const auto& o : model.graph.outputs)
      if (o.name == prediction) predicted = o.dtype;
    // A 16-bit prediction (a model stored in fp16) is compared in fp32: an fp16 loss would round
    // away the small errors fine-tuning reduces, and its square overflows past 256.
    const bool widen = predicted == DType::Float16 || predicted == DType::BFloat16;
    auto as_float = [&](const std::string& v) {
      if (!widen) return v;
      g.nodes.push_back(make_node("volt/float/" + v, "Cast", {v}, {"volt/float/" + v},
                                  {{"to", int_attr(static_cast<int64_t>(DType::Float))}}));
      return "volt/float/" + v;
    };
    if (cfg.loss == "cross_entropy") {
      label.dtype = DType::Int64;
      g.initializers["volt/flat_labels"] = Tensor::from<int64_t>({-1}, {1});
      g.nodes.push_back(make_node("volt/flatten_prediction", "Flatten", {as_float(prediction)},
                                  {"volt/logits"}, {{"axis", int_attr(-1)}}));
      g.nodes.push_back(make_node("volt/flatten_label", "Reshape", {cfg.label, "volt/flat_labels"},
                                  {"volt/labels"}));
      g.nodes.push_back(make_node("volt/loss", "SoftmaxCrossEntropyLoss",
                                  {"volt/logits", "volt/labels"}, {"volt/loss"},
                                  {{"reduction", string_attr("mean")}}));
    } else {  // mse
      label.dtype = predicted;
      g.nodes.push_back(make_node("volt/error", "Sub", {as_float(prediction), as_float(cfg.label)},
                                  {"volt/error"}));
      g.nodes.push_back(
          make_node("volt/squared", "Mul", {"volt/error", "volt/error"}, {"volt/squared"}));
      g.nodes.push_back(make_node("volt/loss", "ReduceMean", {"volt/squared"}, {"volt/loss"},
                                  {{"keepdims", int_attr(0)}}));
    }
    g.inputs.push_back(label);
    return "volt/loss";
  }

  // BatchNormalization uses batch statistics and updates its running ones; Dropout drops.
  void to_training_mode(Graph& g) {
    int dropout_index = 0;
    for (Node& n : g.nodes) {
      if (n.op_type == "BatchNormalization" && n.domain == kOnnxDomain) {
        n.attributes["training_mode"] = int_attr(1);
        while (n.outputs.size() < 3) n.outputs.push_back("");
        for (size_t k : {size_t{1}, size_t{2}}) {
          if (n.outputs[k].empty())
            n.outputs[k] = n.name + (k == 1 ? "/running_mean" : "/running_var");
          if (g.is_initializer(n.inputs[k + 2]) && weights.count(n.inputs[k + 2]))
            running_stats[n.outputs[k]] = n.inputs[k + 2];
        }
        n.outputs.resize(3);
      } else if (n.op_type == "Dropout" && n.domain == kOnnxDomain && n.opset >= 12) {
        const std::string ratio = n.name + "/ratio", on = n.name + "/training";
        if (!n.has_input(1)) {
          g.initializers[ratio] = Tensor::scalar(0.5f);
          if (n.inputs.size() < 2) n.inputs.resize(2);
          n.inputs[1] = ratio;
        }
        g.initializers[on] = Tensor::scalar(true);
        n.inputs.resize(3);
        n.inputs[2] = on;
        if (n.outputs.size() < 2 || n.outputs[1].empty()) {
          n.outputs.resize(2);
          n.outputs[1] = n.name + "/mask";
        }
        // Each rank drops its own units.
        n.attributes["seed"] = int_attr(static_cast<int64_t>(cfg.seed) + dropout_index++ +
                                        (comm ? 1000003 * int64_t{comm->rank()} : 0));
      }
    }
  }

  // Binds data inputs (and the label) plus the current weights.
  std::vector<const Value*> bind(const GraphRunner& r, const NamedValues& batch,
                                 std::vector<Value>& empties) const {
    std::vector<const Value*> fed = bind_feeds(r.compiled(), batch, model.source, empties);
    for (const auto& [name, v] : weight_values) {
      const int id = r.compiled().id(name);
      if (id >= 0) fed[id] = &v;
    }
    return fed;
  }

  static float scalar_loss(const Value& v, const std::string& source) {
    VOLT_CHECK(v.is_tensor() && v.tensor().numel() == 1, InvalidArgument,
               source + ": the loss must be a scalar");
    const Tensor& t = v.tensor();
    if (t.dtype() == DType::Double) return static_cast<float>(t.data<double>()[0]);
    VOLT_CHECK(t.dtype() == DType::Float, InvalidArgument,
               source + ": the loss must be float32 or float64");
    return t.data<float>()[0];
  }

  // The graph for this batch: inputs fed as float CSR matrices select the one whose weights
  // behind them get row-sparse gradients.
  TrainGraph& graph_for(const NamedValues& batch) {
    std::set<std::string> csr_inputs;
    if (cfg.sparse_gradients)
      for (const auto& fed : batch)
        if (fed.second.is_csr() && fed.second.csr().dtype() == DType::Float &&
            std::any_of(model.graph.inputs.begin(), model.graph.inputs.end(),
                        [&](const ValueInfo& i) { return i.name == fed.first; }))
          csr_inputs.insert(fed.first);
    auto found = train_graphs.find(csr_inputs);
    if (found == train_graphs.end())
      found = train_graphs.emplace(csr_inputs, build_training(csr_inputs)).first;
    return found->second;
  }

  // The batch with the loss scale added (mixed_fp16), or the batch.
  NamedValues with_loss_scale(const NamedValues& batch) const {
    if (!mixed) return batch;
    NamedValues scaled_batch = batch;
    scaled_batch.push_back({kLossScaleInput, Tensor::scalar(scaler.scale())});
    return scaled_batch;
  }

  std::string step_name() const { return model.source + ": step " + std::to_string(step + 1); }

  float do_step(const NamedValues& batch) {
    std::lock_guard<std::mutex> lock(mutex);
    // The optimizer and the checks run on the trainer's threads too (several ranks on one
    // machine each ask for their share of the cores).
    const ScopedOmpThreads threads(cfg.threads);
    if (comm || cfg.accumulate_steps > 1) return accumulate_step(batch);
    const TrainGraph& train = graph_for(batch);
    std::vector<Value> empties;
    const NamedValues fed_batch = with_loss_scale(batch);
    const auto fed = bind(*train.runner, fed_batch, empties);
    std::vector<Value> out = train.runner->run(fed);
    const float loss = scalar_loss(out[0], model.source);
    VOLT_CHECK(std::isfinite(loss), Runtime,
               step_name() + ": the loss is not finite; the update was skipped");
    std::map<std::string, Tensor> grads;
    std::map<std::string, RowSparseTensor> row_grads;
    size_t k = 1;
    // Mixed precision: the gradients come scaled. Unscaled copies (the outputs may be the plan's
    // own buffers); an overflow anywhere skips the step, and the scaler backs off.
    bool finite = true;
    auto unscaled = [&](const Tensor& g) {
      if (!mixed) return g;
      Tensor c = g.clone();
      finite = unscale(c.data<float>(), static_cast<size_t>(c.numel()), scaler.scale()) && finite;
      return c;
    };
    for (const auto& name : train.dense) grads[name] = unscaled(out[k++].tensor());
    for (const auto& table : train.sparse) {
      Tensor rows = out[k++].tensor(), values = unscaled(out[k++].tensor());
      row_grads[table] =
          RowSparseTensor::create(weights.at(table).shape(), std::move(rows), std::move(values));
    }
    if (mixed && !scaler.update(finite)) return loss;
    apply_update(grads, row_grads);
    update_running_stats(out, k);
    round_stored();
    ++step;
    return loss;
  }

  // One micro-batch with gradient accumulation and/or several ranks. The dense gradients are
  // summed into buckets as the backward pass produces them (and, on the micro-batch that ends an
  // optimizer step, across ranks as each bucket completes); the row-sparse ones are kept and
  // summed at the end. The update uses the mean over micro-batches and ranks. On several ranks
  // the loss returned is the mean of theirs.
  float accumulate_step(const NamedValues& batch) {
    const bool first = micro == 0, last = micro + 1 == cfg.accumulate_steps;
    // 1. What can fail on one rank alone (bad inputs, building a plan) fails here, before
    // anything is exchanged: the ranks agree on it, and all of them throw.
    TrainGraph* train = nullptr;
    std::vector<Value> empties;
    const NamedValues fed_batch = with_loss_scale(batch);
    std::vector<const Value*> fed;
    std::string error;
    ErrorCode code = ErrorCode::Runtime;
    try {
      train = &graph_for(batch);
      VOLT_CHECK(first || train == accumulating, InvalidArgument,
                 "the micro-batches of one optimizer step must feed the same inputs as CSR "
                 "matrices");
      fed = bind(*train->runner, fed_batch, empties);
      train->runner->plan_for(fed);
    } catch (const Error& e) {
      error = e.what();
      code = e.code();
    }
    if (!comm && !error.empty()) {
      reset_accumulation();
      throw Error(code, error);
    }
    // (train is null when choosing the graph failed; the key is cut to 62 bits so that its
    // negation, which the agreement takes, cannot overflow.)
    if (comm)
      agree(error, code, step_name(),
            {sample_count(batch), train ? static_cast<int64_t>(train->key >> 2) : 0});
    // From here to the step's last collective the ranks are committed: their collectives block
    // (faster), so a failure on one rank alone must end the job (abort), or the others would
    // wait for it. (The failures every rank sees alike, a non-finite loss sum, leave it first.)
    std::optional<Communicator::Committed> committed;
    if (comm) committed.emplace(*comm);
    if (!train->buckets) make_buckets(*train, fed);
    if (first) {
      accumulating = train;
      pending_rows.assign(train->sparse.size(), {});
      if (comm) step_bytes_start = comm->payload_bytes();
    }

    // 2. Forward and backward, the dense gradients summed as they come.
    Communicator* exchange = last ? comm.get() : nullptr;
    DenseGradientBuckets& buckets = *train->buckets;
    buckets.begin(first, exchange);
    const size_t n_dense = train->dense.size();
    const OutputObserver observe = [&](size_t k, const Value& v) {
      if (k >= 1 && k <= n_dense) buckets.add(train->slot_of[k - 1], v.tensor());
    };
    std::vector<Value> out;
    try {
      out = train->runner->run(fed, &observe);
      buckets.finish();
    } catch (const std::exception& e) {
      // The other ranks are past the agreement, in (or on their way to) this step's collectives.
      if (comm) comm->abort(step_name() + " failed during the backward pass: " + e.what());
      reset_accumulation();
      throw;
    }

    // 3. The loss, agreed across ranks.
    const float local_loss = scalar_loss(out[0], model.source);
    double loss = local_loss;
    double failed_ranks = std::isfinite(local_loss) ? 0 : 1;
    if (comm) {
      double sums[2] = {failed_ranks ? 0.0 : loss, failed_ranks};
      comm->sum(sums, 2);
      loss = sums[0] / comm->size();
      failed_ranks = sums[1];
    }
    if (failed_ranks > 0) {
      committed.reset();
      reset_accumulation();
      fail(ErrorCode::Runtime, step_name() + ": the loss is not finite" +
                                   (comm ? " on " + std::to_string(static_cast<int>(failed_ranks)) +
                                               " of " + std::to_string(comm->size()) + " ranks"
                                         : std::string()) +
                                   "; the update was skipped");
    }
    size_t k = 1 + n_dense;
    for (size_t t = 0; t < train->sparse.size(); ++t) {
      Tensor rows = out[k++].tensor(), values = out[k++].tensor();
      pending_rows[t].push_back(RowSparseTensor::create(weights.at(train->sparse[t]).shape(),
                                                        std::move(rows), std::move(values)));
    }
    update_running_stats(out, k);
    if (!last) {
      ++micro;
      return static_cast<float>(loss);
    }

    // 4. The step's gradients: summed, exchanged, scaled to the mean (and unscaled).
    const double count = static_cast<double>(cfg.accumulate_steps) * (comm ? comm->size() : 1);
    const double scale = 1.0 / (count * (mixed ? scaler.scale() : 1.0));
    std::map<std::string, Tensor> grads;
    for (size_t i = 0; i < n_dense; ++i)
      grads[train->dense[i]] = buckets.gradient(train->slot_of[i], scale);
    std::vector<RowSparseTensor> tables;
    for (const auto& parts : pending_rows) tables.push_back(sum_rows(parts));
    const std::vector<std::string> sparse = train->sparse;
    reset_accumulation();
    if (comm && !tables.empty()) try {
        exchange_rows(*comm, tables, cfg.sparse_allreduce_threshold, row_exchange);
      } catch (const std::exception& e) {
        comm->abort(step_name() + " failed exchanging the row-sparse gradients: " + e.what());
      }
    if (comm) last_step_bytes = comm->payload_bytes() - step_bytes_start;
    std::map<std::string, RowSparseTensor> row_grads;
    for (size_t t = 0; t < tables.size(); ++t) {
      scale_rows_in_place(tables[t], scale);
      row_grads[sparse[t]] = tables[t];
    }
    if (mixed) {
      bool finite = true;
      for (const auto& [_, g] : grads)
        finite = finite && all_finite(g.data<float>(), static_cast<size_t>(g.numel()));
      for (const auto& [_, g] : row_grads)
        finite =
            finite && all_finite(g.values().data<float>(), static_cast<size_t>(g.values().numel()));
      if (comm) {  // (the sums are the same on every rank; the flag makes sure of it)
        int64_t overflow = finite ? 0 : 1;
        comm->max(&overflow, 1);
        finite = overflow == 0;
      }
      committed.reset();
      if (!scaler.update(finite)) return static_cast<float>(loss);
    }
    committed.reset();  // (the update is the same on every rank, and so are its failures)
    apply_update(grads, row_grads);
    round_stored();
    ++step;
    return static_cast<float>(loss);
  }

  void reset_accumulation() {
    micro = 0;
    accumulating = nullptr;
    pending_rows.clear();
  }

  // The samples a batch holds: the label's first dimension (or the first input's).
  int64_t sample_count(const NamedValues& batch) const {
    for (const auto& [name, v] : batch)
      if (name == cfg.label && v.is_tensor() && v.tensor().rank() > 0) return v.tensor().dim(0);
    for (const auto& [name, v] : batch) {
      if (v.is_tensor() && v.tensor().rank() > 0) return v.tensor().dim(0);
      if (v.is_csr()) return v.csr().rows();
    }
    return -1;
  }

  // The buckets follow the order in which the plan computes the dense gradients (rank 0's, so
  // that every rank starts the same all-reduces in the same order).
  void make_buckets(TrainGraph& train, const std::vector<const Value*>& fed) {
    const auto plan = train.runner->plan_for(fed);
    const size_t n = train.dense.size();
    std::vector<size_t> produced(plan->graph->names.size(), plan->steps.size());
    for (size_t s = 0; s < plan->steps.size(); ++s)
      for (int id : plan->steps[s].outputs)
        if (id >= 0) produced[static_cast<size_t>(id)] = s;
    std::vector<int64_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return produced[static_cast<size_t>(plan->graph->graph_outputs[static_cast<size_t>(a) + 1])] <
             produced[static_cast<size_t>(plan->graph->graph_outputs[static_cast<size_t>(b) + 1])];
    });
    if (comm) {
      std::string bytes(reinterpret_cast<const char*>(order.data()), n * sizeof(int64_t));
      comm->broadcast(bytes, 0);
      std::memcpy(order.data(), bytes.data(), n * sizeof(int64_t));
    }
    std::vector<DenseGradientBuckets::Slot> slots;
    train.slot_of.assign(n, 0);
    for (size_t j = 0; j < n; ++j) {
      const Tensor& w = weights.at(train.dense[static_cast<size_t>(order[j])]);
      slots.push_back({w.dtype(), w.shape()});
      train.slot_of[static_cast<size_t>(order[j])] = j;
    }
    train.buckets = std::make_unique<DenseGradientBuckets>(std::move(slots), kBucketBytes);
  }

  // Every rank reports whether it got here without an error and the values it must share; if
  // one failed, all throw with every failing rank's reason, so none waits for collectives the
  // others will not make. extra = {samples, graph key}.
  void agree(const std::string& error, ErrorCode code, const std::string& what,
             const std::vector<int64_t>& extra) {
    std::vector<int64_t> h{error.empty() ? 0 : 1};
    for (int64_t v : extra) {
      h.push_back(v);
      h.push_back(-v);
    }
    comm->max(h.data(), h.size());
    if (h[0]) {
      reset_accumulation();
      const Communicator::Gathered all = comm->gather_all(error.data(), error.size());
      std::string text;
      for (size_t r = 0; r < all.size.size(); ++r)
        if (all.size[r])
          text += (text.empty() ? "rank " : "; rank ") + std::to_string(r) + ": " + all.str(r);
      throw Error(error.empty() ? ErrorCode::Runtime : code,
                  what + " failed on " + text + " (no rank applied it)");
    }
    if (extra.size() >= 1 && h[1] != -h[2]) {
      reset_accumulation();
      fail(ErrorCode::InvalidArgument,
           what + ": the ranks fed between " + std::to_string(-h[2]) + " and " +
               std::to_string(h[1]) +
               " samples; each rank must feed the same number (its share of the global batch)");
    }
    if (extra.size() >= 2 && h[3] != -h[4]) {
      reset_accumulation();
      fail(ErrorCode::InvalidArgument,
           what + ": the ranks fed different inputs as CSR matrices; all must feed the same kinds");
    }
  }

  // The ranks must train one model with one set of options: rank 0's are the reference.
  void check_same_job(const std::string& path) {
    const std::string mine =
        std::to_string(fingerprint(model_bytes)) + "\n" + shared_options_text(cfg);
    const Communicator::Gathered gathered = comm->gather_all(mine.data(), mine.size());
    std::vector<std::string> all;
    for (size_t r = 0; r < gathered.size.size(); ++r) all.push_back(gathered.str(r));
    for (size_t r = 1; r < all.size(); ++r) {
      if (all[r] == all[0]) continue;
      const std::string who = "rank " + std::to_string(r);
      if (all[r].substr(0, all[r].find('\n')) != all[0].substr(0, all[0].find('\n')))
        fail(ErrorCode::InvalidArgument,
             path + ": " + who + " loaded a different model than rank 0 (the files differ)");
      std::istringstream a(all[0]), b(all[r]);
      for (std::string la, lb; std::getline(a, la) && std::getline(b, lb);)
        if (la != lb)
          fail(ErrorCode::InvalidArgument, path + ": " + who + "'s training option " + lb +
                                               " differs from rank 0's " + la +
                                               "; every rank must train with the same options");
    }
  }

  // The model's own optimizer-free updates (BatchNormalization's running statistics), from the
  // step's outputs starting at k; on several ranks, their mean, so replicas stay equal.
  void update_running_stats(const std::vector<Value>& out, size_t k) {
    std::vector<Tensor> stats;
    for (size_t i = 0; i < running_stats.size(); ++i) stats.push_back(out[k++].tensor());
    if (comm && !stats.empty()) {
      std::vector<float> flat;
      for (Tensor& t : stats) {
        t = t.dtype() == DType::Float ? t.clone() : converted(t, DType::Float);
        flat.insert(flat.end(), t.data<float>(), t.data<float>() + t.numel());
      }
      comm->sum(flat.data(), flat.size());
      size_t at = 0;
      for (Tensor& t : stats)
        for (int64_t e = 0; e < t.numel(); ++e)
          t.data<float>()[e] = flat[at++] / static_cast<float>(comm->size());
    }
    size_t i = 0;
    for (const auto& [outname, init] : running_stats) {
      Tensor stat = stats[i++];
      Tensor& w = weights.at(init);
      if (stat.dtype() != w.dtype()) stat = converted(stat, w.dtype());  // fp16 under mixed_fp16
      VOLT_CHECK(stat.nbytes() == w.nbytes(), Runtime,
                 "running statistic '" + init + "' changed shape");
      std::memcpy(w.raw(), stat.raw(), w.nbytes());
    }
  }

  // Checks the gradients, clips them, and lets the optimizer apply them.
  void apply_update(std::map<std::string, Tensor>& grads,
                    std::map<std::string, RowSparseTensor>& row_grads) {
    double sq = 0;
    // The sum of squares is also the finiteness check (a NaN or Inf makes it non-finite); for
    // tables it covers the touched rows only, which hold all of their gradient.
    auto check = [&](const Tensor& g, const std::string& name) {
      const double s = sum_of_squares(g);
      VOLT_CHECK(
          std::isfinite(s), Runtime,
          step_name() + ": the gradient of '" + name + "' is not finite; the update was skipped");
      sq += s;
    };
    for (const auto& [name, g] : grads) check(g, name);
    for (const auto& [table, g] : row_grads) check(g.values(), table);
    if (cfg.max_grad_norm > 0) {
      const double norm = std::sqrt(sq);
      if (norm > cfg.max_grad_norm) {
        scale_all(grads, cfg.max_grad_norm / norm);
        for (auto& [_, g] : row_grads)
          g = RowSparseTensor::create(g.dense_shape(), g.rows(),
                                      scaled(g.values(), cfg.max_grad_norm / norm));
      }
    }
    if (!cfg.lazy_update)  // the standard dense semantics, for comparison
      for (auto& [table, g] : row_grads) grads[table] = g.to_dense();
    optimizer.step(weights, grads, lr, step + 1);
    if (cfg.lazy_update) optimizer.step_rows(weights, row_grads, lr, step + 1);
  }

  // A checkpoint that rank 0 reads and every rank applies (the others need not see the file).
  void load_shared(const std::string& path) {
    std::string bytes, error;
    if (comm->rank() == 0) try {
        bytes = read_checkpoint_bytes(path);
      } catch (const Error& e) {
        error = e.what();
      }
    comm->broadcast(error, 0);
    VOLT_CHECK(error.empty(), Io, error + " (read on rank 0)");
    comm->broadcast(bytes, 0);
    restore(decode_checkpoint(bytes, path), path);
  }

  // The graphs see a weight stored in fp16 as the file will hold it: its master rounded to fp16,
  // so that predictions and evaluations are the exported model's.
  void round_stored() {
    for (const auto& [name, dtype] : stored_dtype) {
      const Tensor& master = weights.at(name);
      auto it = weight_values.find(name);
      if (it == weight_values.end() || it->second.tensor().raw() == master.raw())
        it =
            weight_values.insert_or_assign(name, Value(Tensor::empty(DType::Float, master.shape())))
                .first;  // the graphs' own copy, made once
      const float* src = master.data<float>();
      float* dst = it->second.tensor().data<float>();
      for (int64_t e = 0; e < master.numel(); ++e)  // (only fp16 is stored narrower)
        dst[e] = static_cast<float>(Float16(src[e]));
    }
  }

  static double sum_of_squares(const Tensor& t) {
    const int64_t n = t.numel();
    if (t.dtype() == DType::Float) {
      const float* p = t.data<float>();
      constexpr int64_t kChunk = 32768;
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      double s = 0;
#pragma omp parallel for reduction(+ : s) if (chunks > 1)
      for (int64_t c = 0; c < chunks; ++c)
        s += sum_of_squares_f32(p + c * kChunk, std::min(kChunk, n - c * kChunk));
      return s;
    }
    double s = 0;
    dispatch_float(t, [&](double v) { s += v * v; });
    return s;
  }

  template <class F>
  static void dispatch_float(const Tensor& t, F f) {
    if (t.dtype() == DType::Float) {
      const float* p = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) f(static_cast<double>(p[i]));
    } else if (t.dtype() == DType::Double) {
      const double* p = t.data<double>();
      for (int64_t i = 0; i < t.numel(); ++i) f(p[i]);
    } else if (t.dtype() == DType::Float16) {
      for (int64_t i = 0; i < t.numel(); ++i)
        f(static_cast<double>(static_cast<float>(t.data<Float16>()[i])));
    } else if (t.dtype() == DType::BFloat16) {
      for (int64_t i = 0; i < t.numel(); ++i)
        f(static_cast<double>(static_cast<float>(t.data<BFloat16>()[i])));
    }
  }

  static Tensor scaled(const Tensor& g, double s) {
    Tensor c = g.clone();
    if (c.dtype() == DType::Float)
      for (int64_t i = 0; i < c.numel(); ++i)
        c.data<float>()[i] = static_cast<float>(c.data<float>()[i] * s);
    else if (c.dtype() == DType::Double)
      for (int64_t i = 0; i < c.numel(); ++i) c.data<double>()[i] *= s;
    return c;
  }
  static void scale_all(std::map<std::string, Tensor>& grads, double s) {
    for (auto& [_, g] : grads) g = scaled(g, s);
  }

  Checkpoint snapshot() const {
    Checkpoint c;
    c.step = step;
    c.learning_rate = lr;
    c.optimizer = cfg.optimizer;
    for (const auto& [name, t] : weights) c.tensors["param/" + name] = t.clone();
    optimizer.save(c);
    if (mixed) {
      c.tensors[kScaleKey] = Tensor::scalar(scaler.scale());
      c.tensors[kCleanStepsKey] = Tensor::scalar(static_cast<int64_t>(scaler.clean_steps()));
      c.tensors[kSkippedKey] = Tensor::scalar(scaler.skipped_steps());
    }
    return c;
  }

  // The loss scaler a checkpoint holds, or the current one where it holds none (one written in
  // fp32 resumes with the current scale).
  LossScaler restored_scaler(const Checkpoint& c, const std::string& path) const {
    LossScaler restored = scaler;
    if (!mixed || !c.tensors.count(kScaleKey)) return restored;
    auto scalar = [&](const std::string& key, DType dtype) -> const Tensor& {
      auto it = c.tensors.find(key);
      VOLT_CHECK(it != c.tensors.end() && it->second.numel() == 1 && it->second.dtype() == dtype,
                 InvalidArgument,
                 path + ": the checkpoint's '" + key + "' is missing or malformed");
      return it->second;
    };
    try {
      restored.restore(scalar(kScaleKey, DType::Float).data<float>()[0],
                       static_cast<int>(std::clamp<int64_t>(
                           scalar(kCleanStepsKey, DType::Int64).data<int64_t>()[0], -1, 1 << 30)),
                       scalar(kSkippedKey, DType::Int64).data<int64_t>()[0]);
    } catch (const Error& e) {
      fail(ErrorCode::InvalidArgument, path + ": " + e.what());
    }
    return restored;
  }

  void restore(const Checkpoint& c, const std::string& path) {
    VOLT_CHECK(c.optimizer == cfg.optimizer, InvalidArgument,
               path + ": the checkpoint was written with optimizer '" + c.optimizer +
                   "', this trainer uses '" + cfg.optimizer + "'");
    // Check everything before changing anything.
    for (const auto& [name, t] : weights) {
      auto it = c.tensors.find("param/" + name);
      VOLT_CHECK(it != c.tensors.end(), InvalidArgument,
                 path + ": the checkpoint has no weight '" + name + "'");
      VOLT_CHECK(it->second.shape() == t.shape() && it->second.dtype() == t.dtype(),
                 InvalidArgument,
                 path + ": weight '" + name + "' is " + dtype_name(it->second.dtype()) +
                     shape_str(it->second.shape()) + " in the checkpoint, " +
                     dtype_name(t.dtype()) + shape_str(t.shape()) + " in the model");
    }
    for (const auto& [key, _] : c.tensors)
      if (key.rfind("param/", 0) == 0)
        VOLT_CHECK(
            weights.count(key.substr(6)), InvalidArgument,
            path + ": the checkpoint has weight '" + key.substr(6) + "', which the model lacks");
    Optimizer restored(cfg);
    restored.load(c, weights, path);
    const LossScaler scaler_state = restored_scaler(c, path);
    for (auto& [name, t] : weights)
      std::memcpy(t.raw(), c.tensors.at("param/" + name).raw(), t.nbytes());
    round_stored();
    optimizer = std::move(restored);
    scaler = scaler_state;
    step = c.step;
    lr = c.learning_rate;
  }
};

Trainer::Trainer(const std::string& model_path, const TrainOptions& options)
    : impl_(std::make_unique<Impl>(model_path, options)) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

float Trainer::step(const NamedValues& batch) {
  return impl_->do_step(batch);
}

float Trainer::evaluate(const NamedValues& batch) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<Value> empties;
  const auto fed = impl_->bind(*impl_->eval, batch, empties);
  return Impl::scalar_loss(impl_->eval->run(fed)[0], impl_->model.source);
}

std::vector<Value> Trainer::predict(const NamedValues& inputs) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  std::vector<Value> empties;
  const auto fed = impl_->bind(*impl_->infer, inputs, empties);
  return impl_->infer->run(fed);
}

void Trainer::set_learning_rate(float lr) {
  VOLT_CHECK(std::isfinite(lr) && lr >= 0, InvalidArgument,
             "learning rate must be finite and >= 0, got " + std::to_string(lr));
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->lr = lr;
}
float Trainer::learning_rate() const {
  return static_cast<float>(impl_->lr);
}
int64_t Trainer::steps() const {
  return impl_->step;
}
float Trainer::loss_scale() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->mixed ? impl_->scaler.scale() : 1.0f;
}
int64_t Trainer::skipped_steps() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->scaler.skipped_steps();
}
const std::vector<std::string>& Trainer::trainable() const {
  return impl_->trainable;
}
const Tensor& Trainer::weight(const std::string& name) const {
  auto it = impl_->weights.find(name);
  VOLT_CHECK(it != impl_->weights.end(), InvalidArgument,
             "no float initializer named '" + name + "'");
  return it->second;
}

void Trainer::save_checkpoint(const std::string& path) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->comm && impl_->comm->rank() != 0) return;  // the replicas are equal: rank 0 writes
  write_checkpoint(path, impl_->snapshot());
}

void Trainer::load_checkpoint(const std::string& path) {
  if (impl_->comm) {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->load_shared(path);
    return;
  }
  const Checkpoint c = read_checkpoint(path);
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->restore(c, path);
}

void Trainer::export_model(const std::string& onnx_path) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  if (impl_->comm && impl_->comm->rank() != 0) return;
  std::map<std::string, Tensor> all = impl_->model.graph.initializers;
  for (const auto& [name, t] : impl_->weights) all[name] = t;
  for (const auto& [name, dtype] : impl_->stored_dtype) all[name] = converted(all.at(name), dtype);
  write_model_with_weights(impl_->model_bytes, impl_->model.source, all, onnx_path);
}

int Trainer::rank() const {
  return impl_->comm ? impl_->comm->rank() : 0;
}
int Trainer::world_size() const {
  return impl_->comm ? impl_->comm->size() : 1;
}
int64_t Trainer::exchanged_bytes() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return static_cast<int64_t>(impl_->last_step_bytes);
}

}  // namespace volt
