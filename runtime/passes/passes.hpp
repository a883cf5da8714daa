// Graph passes: each is a pure function Graph -> Graph in a file of its own, run in the order
// of optimization_passes() at session creation.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/graph.hpp"

namespace volt {

struct Pass {
  std::string name;
  int min_level;  // runs when SessionOptions::optimization_level >= min_level (0: always)
  std::function<Graph(const Graph&)> apply;
  // Also needed to run, where set: an option that asks for it.
  std::function<bool(const SessionOptions&)> wanted = nullptr;
  // Reads the graph inputs' declared shapes, which only the main graph's feeds are checked
  // against (runtime/feeds.cpp): not run on subgraph bodies.
  bool main_graph_only = false;
};

const std::vector<Pass>& optimization_passes();
Graph run_passes(const Graph& graph, const SessionOptions& options);

// The passes themselves.
Graph eliminate_dead_nodes(const Graph& graph);
Graph remove_identities(const Graph& graph);
Graph constants_as_initializers(const Graph& graph);
Graph expand_gradient_ops(const Graph& graph);
Graph fold_conv_batchnorm(const Graph& graph);
Graph fold_pad_into_conv(const Graph& graph);
Graph reduce_mean_as_global_pool(const Graph& graph);
Graph fold_clamped_gates(const Graph& graph);
Graph fuse_gelu(const Graph& graph);
Graph fuse_embedding_bag(const Graph& graph);
// Shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape) as one volt.ShapeFormula
// node or an initializer per value read (fold_shape_arithmetic.cpp).
Graph fold_shape_arithmetic(const Graph& graph);
// A stack of concatenations of one tensor's slices with other parts (a decoder's present keys
// and values) as one concatenation of the tensor with the stacked parts
// (interchange_stacked_concats.cpp).
Graph interchange_stacked_concats(const Graph& graph);
Graph fuse_layer_norm(const Graph& graph);
Graph fuse_attention(const Graph& graph);
Graph fuse_matmul_epilogue(const Graph& graph);
Graph fold_transpose_into_matmul(const Graph& graph);
Graph fuse_conv_activation(const Graph& graph);
Graph distribute_channel_concat(const Graph& graph);
Graph keep_sparse_weights(const Graph& graph);
Graph use_channels_last(const Graph& graph);
// The suffix use_channels_last gives the values of its region ("<name>/nhwc"), which later
// passes go by.
inline const std::string kChannelsLastSuffix = "/nhwc";
inline bool is_channels_last_value(const std::string& v) {
  const std::string& s = kChannelsLastSuffix;
  return v.size() > s.size() && v.compare(v.size() - s.size(), s.size(), s) == 0;
}
Graph prefer_winograd(const Graph& graph);
Graph fuse_depthwise_block(const Graph& graph);
Graph fuse_channel_shuffle(const Graph& graph);
Graph fold_channel_scale_into_conv(const Graph& graph);
// Conv -> MaxPool (non-overlapping windows) into one Conv with volt.max_pool, where volt's
// few-channel loop takes the convolution (fuse_conv_max_pool.cpp).
Graph fuse_conv_max_pool(const Graph& graph);
Graph use_blocked_layout(const Graph& graph);
Graph use_bf16(const Graph& graph);
Graph compute_fp16_in_fp32(const Graph& graph);
Graph lower_quantized(const Graph& graph);
// precision = int8: float Conv / MatMul / Gemm layers quantized at load, their inputs
// dynamically (quantize_at_load) or with ranges a calibration batch gave (quantize_static; the
// layers whose input has no range are quantized dynamically). quantizable_inputs: the values
// calibration measures.
struct ActivationRange {
  float lo, hi;
};
Graph quantize_at_load(const Graph& graph);
Graph quantize_static(const Graph& graph, const std::map<std::string, ActivationRange>& ranges);
std::vector<std::string> quantizable_inputs(const Graph& graph);
// How use_fp16 treats float weights: converted once (inference), or kept in fp32 and cast by a
// node each run (mixed-precision training: the fp32 masters are what the optimizer updates, and
// the gradient reaches them through the Cast).
enum class Fp16Weights { ConvertOnce, CastEachRun };
Graph use_fp16(const Graph& graph, Fp16Weights weights);
// Nodes with a kernel on `device` (as `device_runs` says; by default, the registry) run there;
// the rest stay on the host, with explicit copy nodes where values cross (place_on_device.cpp).
Graph place_on_device(const Graph& graph, Device device,
                      const std::function<bool(const Node&)>& device_runs);
Graph place_on_device(const Graph& graph, Device device);

// --- what passes ask of a graph (graph_queries.cpp) ---------------------------------------------

// Who reads each value and which node makes it, as of when it was built.
class ValueUses {
 public:
  static constexpr size_t kSubgraph = static_cast<size_t>(-1);  // read inside a subgraph
  struct Reader {
    size_t node;  // index in graph.nodes
    size_t slot;  // input index, or kSubgraph
  };
  explicit ValueUses(const Graph& g);
  const std::vector<Reader>& readers(const std::string& v) const;
  std::optional<size_t> producer(const std::string& v) const;
  bool is_graph_output(const std::string& v) const { return outputs_.count(v) != 0; }
  // The one node that reads `v` (as a node input), if exactly one does and `v` is not a graph
  // output.
  std::optional<size_t> sole_reader(const std::string& v) const;

 private:
  // (Hashed: every pass builds one over the whole graph, and looks values up by name.)
  std::unordered_map<std::string, std::vector<Reader>> readers_;
  std::unordered_map<std::string, size_t> producer_;
  std::unordered_set<std::string> outputs_;
};

// The value of an initializer or of a Constant node's `value`; nullptr for anything else.
const Tensor* constant_value(const Graph& g, const std::string& name);

// Whether `n` is the default-domain op `op`.
bool is_onnx_op(const Node& n, const char* op);

// Input `slot` of `n` if it is a constant fp32 tensor of rank `rank`; else nullptr.
const Tensor* constant_float_input(const Graph& g, const Node& n, size_t slot, size_t rank);
// Whether every value of `v` is `want` (true for none).
bool all_of_ints(const std::vector<int64_t>& v, int64_t want);
// A Conv in the channels-last region (volt.layout NHWC, reading channels-last X, fp32) with
// constant fp32 weights (and bias, if any); a residual (input 3) only where `residual` allows.
bool nhwc_conv_with_constant_weights(const Graph& g, const Node& n, bool residual);
// Such a Conv that is 1×1 over `channels` input channels: stride 1, no padding, one group.
bool nhwc_pointwise_conv(const Graph& g, const Node& n, int64_t channels, bool residual);

// A scalar of a float type (fp32, fp16 or fp64, as float) the graph holds as a constant
// (initializer or Constant node), if `name` is one.
std::optional<float> constant_scalar(const Graph& g, const std::string& name);

// The volt.* attributes (volt.activation, volt.alpha, volt.beta) that fold the activation node
// `act` into the op before it: Relu, LeakyRelu, Clip with constant bounds, Gelu, Sigmoid, Tanh,
// Elu, HardSigmoid, HardSwish. Empty when
// `act` is none of these or cannot be folded.
std::map<std::string, Attribute> activation_attributes(const Graph& g, const Node& act);

// x * gate(x) read from `v`'s two readers: the gate Sigmoid (Swish, SiLU) or HardSigmoid with
// HardSwish's parameters, and a Mul of v and the gate, the gate's only reader. `attributes`
// are the volt.* ones that fold both into v's producer; `gate` and `mul` the nodes it replaces.
struct GatedActivation {
  std::map<std::string, Attribute> attributes;
  size_t gate, mul;
};
std::optional<GatedActivation> gated_activation(const Graph& g, const ValueUses& uses,
                                                const std::string& v);

// The rank of a value when the graph declares it (initializers, graph inputs, value_info); -1
// when it does not.
int declared_rank(const Graph& g, const std::string& name);
// The graph input or value_info entry that declares `name`; nullptr when none does.
const ValueInfo* declared_value(const Graph& g, const std::string& name);

// The names of the graph's values (node outputs and graph inputs), and `base` or `base.k` (k = 1,
// 2, ...), the first that is neither among `taken` nor an initializer: for values a pass adds.
std::set<std::string> value_names(const Graph& g);
std::string unique_name(const Graph& g, const std::set<std::string>& taken, std::string base);

// The working state of a pass that replaces patterns of nodes: a copy of the graph, who reads
// what (as of the original), and which nodes are gone.
class PatternRewrite {
 public:
  explicit PatternRewrite(const Graph& graph)
      : g_(graph), uses_(graph), removed_(graph.nodes.size()) {}
  Graph& graph() { return g_; }
  const ValueUses& uses() const { return uses_; }
  // The one reader of `v` (see ValueUses::sole_reader) if it is still there and, when `op` is
  // given, is that default-domain op.
  Node* sole_reader(const std::string& v, const char* op = nullptr);
  size_t index(const Node* n) const { return static_cast<size_t>(n - g_.nodes.data()); }
  bool removed(const Node* n) const { return removed_[index(n)] != 0; }
  void remove(const Node* n) { removed_[index(n)] = 1; }
  // Puts `n` where `at` is (the pattern's inputs exist before it and its readers come after).
  void replace(const Node* at, Node n);
  Graph finish();

 private:
  Graph g_;
  ValueUses uses_;
  std::vector<char> removed_;
};

// Drops the nodes whose flag in `marked` (one per node) is set, keeping the others' order.
void erase_marked(std::vector<Node>& nodes, const std::vector<char>& marked);

// A Cast of `in` to `to`, writing `out` (node named after it).
Node cast_node(const std::string& in, const std::string& out, DType to);

// A pass that changes the graph's float type keeps the caller's: graph inputs of dtype `outer`
// (not initializer-backed) enter through a Cast to `inner` ("<name>@<suffix>", which their
// readers then read), and outputs of dtype `outer` leave through a Cast back from `inner` (their
// producer writes "<name>@<suffix>"). An input passed straight through stays as it came; an
// initializer that is an output keeps `original`'s value under its name, its readers a copy.
void cast_graph_boundary(Graph& g, const Graph& original, DType outer, DType inner,
                         const std::string& suffix);

// Conv's geometry attributes (auto_pad, dilations, group, kernel_shape, pads, strides) of `from`
// onto `to`: a pass that rewrites a convolution into another op keeps its window.
void copy_conv_geometry(const Node& from, Node& to);

// A node of the default domain (or of `domain` set after).
Node make_node(const std::string& name, const std::string& op, std::vector<std::string> ins,
               std::vector<std::string> outs, int opset);

// Not in the list: run per plan for the graph inputs fed as CSR matrices. Consumers that run a
// sparse × dense kernel (MatMul input 0, Gemm input 0 without transA, B a 2-D weight) read
// them as they are; every other consumer reads a dense copy that one ai.volt Densify node per
// input makes. `spmm_ok`: the inputs whose element type the sparse kernels take.
Graph densify_sparse_inputs(const Graph& graph, const std::vector<std::string>& sparse_inputs,
                            const std::vector<std::string>& spmm_ok);

}  // namespace volt
