// A Concat along channels whose readers are convolutions (directly or through pools) is not
// made: a convolution over concatenated channels is the sum of convolutions over each part,
//   Conv(Concat(a, b), [Wa Wb]) = Conv(a, Wa) + Conv(b, Wb),
// so the first part's convolution writes the output and each later one adds to it (the
// residual input, oneDNN's sum post-op: the output's buffer is read once more, in place). Max
// and average pools work channel by channel, so they run on each part. SqueezeNet's Fire
// modules concatenate two expansions and squeeze them again at once: the copy of every
// channel (10-17% of its batch-8 run, channels-last interleaving) goes; so does a U-Net
// decoder's Concat of the upsampled map and the skip connection before its 3x3 convolution
// (unet_convtranspose, A/B: ~5% at batches 1 and 8).
//
// Only where it pays: each convolution split in k parts reads and writes its output k-1 more
// times, against the Concat's one read and one write of all channels. The pass applies when
// sum((k - 1) * output channels) over the convolutions is at most the concatenated channels
// (SqueezeNet's classifier, 512 channels into 1000, keeps its Concat; Inception's blocks,
// whose every branch reads the Concat, keep theirs). Runs after the activation fusion: a
// convolution's activation goes to its last part, its bias to its first.
#include <numeric>
#include <set>

#include "runtime/passes/passes.hpp"

namespace volt {
namespace {

// The number of channels (dimension 1) of `v`, where the graph makes it plain: a convolution's
// or transposed convolution's constant weights, through ops that keep channels. 0 when unknown.
int64_t channels_of(const Graph& g, const ValueUses& uses, const std::string& v, int depth = 0) {
  const auto p = uses.producer(v);
  if (!p || depth > 16) return 0;
  const Node& n = g.nodes[*p];
  if (is_onnx_op(n, "Conv") && n.inputs.size() >= 2) {
    const Tensor* w = constant_value(g, n.inputs[1]);
    return w && w->rank() >= 3 ? w->shape()[0] : 0;
  }
  if (is_onnx_op(n, "ConvTranspose") && n.inputs.size() >= 2) {  // W: [C, M / group, k...]
    const Tensor* w = constant_value(g, n.inputs[1]);
    return w && w->rank() >= 3 ? w->shape()[1] * n.attr_int("group", 1) : 0;
  }
  static const char* const kKeepChannels[] = {"Relu", "MaxPool", "AveragePool", "LeakyRelu",
                                              "Clip", "Sigmoid", "HardSigmoid", "HardSwish"};
  for (const char* op : kKeepChannels)
    if (is_onnx_op(n, op) && !n.inputs.empty()) return channels_of(g, uses, n.inputs[0], depth + 1);
  return 0;
}

bool is_pool(const Node& n) {
  return (is_onnx_op(n, "MaxPool") || is_onnx_op(n, "AveragePool")) && n.inputs.size() == 1 &&
         n.outputs.size() == 1 && n.attr_string("auto_pad", "NOTSET") == "NOTSET" &&
         n.attr_int("storage_order", 0) == 0;
}

// A convolution that can take its input as parts of `channels` channels: float weights held
// as a constant, one group, no residual yet, reading the value as X only.
bool splittable_conv(const Graph& g, const Node& n, const std::string& v, int64_t channels) {
  if (!is_onnx_op(n, "Conv") || n.inputs.size() < 2 || n.inputs.size() > 3 ||
      n.outputs.size() != 1 || n.inputs[0] != v || n.inputs[1] == v ||
      (n.has_input(2) && n.inputs[2] == v) || n.attr_int("group", 1) != 1)
    return false;
  const Tensor* w = constant_value(g, n.inputs[1]);
  return w && w->dtype() == DType::Float && w->rank() >= 3 && w->shape()[1] == channels;
}

class Distributor {
 public:
  Distributor(Graph& g, const ValueUses& uses) : g_(g), uses_(uses), into_(g.nodes.size()) {
    for (const Node& n : g.nodes) names_.insert(n.outputs.begin(), n.outputs.end());
    for (const ValueInfo& v : g.inputs) names_.insert(v.name);
    for (const auto& [name, _] : g.initializers) names_.insert(name);
  }

  // Whether every reader of `v` (of `channels` channels) takes its parts; adds the extra output
  // channels the split convolutions write again to `cost`.
  bool distributable(const std::string& v, int64_t channels, size_t parts, int64_t& cost,
                     int depth = 0) const {
    if (uses_.is_graph_output(v) || depth > 8) return false;
    const auto& readers = uses_.readers(v);
    if (readers.empty()) return false;
    for (const ValueUses::Reader& r : readers) {
      if (r.slot == ValueUses::kSubgraph || taken_[r.node]) return false;
      const Node& n = g_.nodes[r.node];
      if (splittable_conv(g_, n, v, channels)) {
        cost += static_cast<int64_t>(parts - 1) * constant_value(g_, n.inputs[1])->shape()[0];
      } else if (!(is_pool(n) && distributable(n.outputs[0], channels, parts, cost, depth + 1))) {
        return false;
      }
    }
    return true;
  }

  // Rewrites the readers of `v`, now the parts `parts` of `sizes` channels.
  void distribute(const std::string& v, const std::vector<std::string>& parts,
                  const std::vector<int64_t>& sizes) {
    for (const ValueUses::Reader& r : uses_.readers(v)) {
      if (taken_[r.node]) continue;  // a node that reads v twice
      taken_[r.node] = 1;
      const Node n = g_.nodes[r.node];
      if (is_pool(n)) {
        std::vector<std::string> pooled;
        for (size_t k = 0; k < parts.size(); ++k) {
          Node p = n;
          p.name = n.name + "/part" + std::to_string(k);
          p.inputs = {parts[k]};
          p.outputs = {unique(n.outputs[0] + "/part" + std::to_string(k))};
          pooled.push_back(p.outputs[0]);
          into_[r.node].push_back(std::move(p));
        }
        distribute(n.outputs[0], pooled, sizes);
      } else {
        split_conv(r.node, n, parts, sizes);
      }
    }
  }

  void mark(size_t node) { taken_[node] = 1; }

  // The graph's nodes with each rewritten node replaced by what it became.
  std::vector<Node> nodes() {
    std::vector<Node> out;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!taken_[i]) out.push_back(std::move(g_.nodes[i]));
      for (Node& n : into_[i]) out.push_back(std::move(n));
    }
    return out;
  }

 private:
  void split_conv(size_t at, const Node& conv, const std::vector<std::string>& parts,
                  const std::vector<int64_t>& sizes) {
    const Tensor w = *constant_value(g_, conv.inputs[1]);
    const Shape& ws = w.shape();
    const int64_t m = ws[0], c = ws[1];
    const int64_t taps = w.numel() / std::max<int64_t>(m * c, 1);
    int64_t first = 0;
    std::string sum;  // what the parts before wrote
    for (size_t k = 0; k < parts.size(); ++k) {
      const std::string tag = "/part" + std::to_string(k);
      Shape part_shape = ws;
      part_shape[1] = sizes[k];
      Tensor part = Tensor::empty(DType::Float, part_shape);
      for (int64_t o = 0; o < m; ++o)
        std::copy_n(w.data<float>() + (o * c + first) * taps, sizes[k] * taps,
                    part.data<float>() + o * sizes[k] * taps);
      first += sizes[k];
      const std::string wname = unique(conv.name + tag + "/W");
      g_.initializers[wname] = std::move(part);
      Node p = conv;
      p.name = conv.name + tag;
      p.inputs = {parts[k], wname, k == 0 && conv.has_input(2) ? conv.inputs[2] : ""};
      if (!sum.empty())
        p.inputs.push_back(sum);
      else if (p.inputs[2].empty())
        p.inputs.resize(2);
      const bool last = k + 1 == parts.size();
      if (!last) {
        for (const char* a : {"volt.activation", "volt.alpha", "volt.beta"}) p.attributes.erase(a);
        p.outputs = {unique(conv.outputs[0] + tag)};
      }
      sum = p.outputs[0];
      into_[at].push_back(std::move(p));
    }
  }

  // `base`, or `base` with underscores after it: a name no value of the graph has.
  std::string unique(std::string base) {
    while (!names_.insert(base).second) base += "_";
    return base;
  }

  Graph& g_;
  const ValueUses& uses_;
  std::set<std::string> names_;
  std::vector<char> taken_ = std::vector<char>(g_.nodes.size(), 0);
  std::vector<std::vector<Node>> into_;
};

}  // namespace

Graph distribute_channel_concat(const Graph& graph) {
  Graph g = graph;
  const ValueUses uses(graph);
  Distributor d(g, uses);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& cat = graph.nodes[i];
    if (!is_onnx_op(cat, "Concat") || cat.attr_int("axis", 0) != 1 || cat.inputs.size() < 2 ||
        cat.outputs.size() != 1)
      continue;
    std::vector<int64_t> sizes;
    for (const std::string& in : cat.inputs) sizes.push_back(channels_of(graph, uses, in));
    if (std::find(sizes.begin(), sizes.end(), 0) != sizes.end()) continue;
    const int64_t channels = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    int64_t cost = 0;
    if (!d.distributable(cat.outputs[0], channels, cat.inputs.size(), cost) || cost > channels)
      continue;
    d.mark(i);
    d.distribute(cat.outputs[0], cat.inputs, sizes);
  }
  g.nodes = d.nodes();
  return g;
}

}  // namespace volt
