#include "operators/common/cpu_isa.hpp"
#include "runtime/passes/passes.hpp"

namespace volt {

namespace {
// Passes that rewrite for oneDNN's CPU kernels (post-op attributes, blocked layouts, Winograd)
// are for CPU sessions; on an accelerator they would keep nodes from its kernels.
bool on_cpu(const SessionOptions& o) {
  return o.device == "cpu";
}
}  // namespace

const std::vector<Pass>& optimization_passes() {
  static const std::vector<Pass> passes = {
      {"expand_gradient_ops", 0, expand_gradient_ops},
      // fp16 models compute in fp32 on the CPU (it has no fp16 arithmetic; oneDNN's fp32
      // primitives run at full speed): before the passes that fold and fuse, so they see fp32.
      {"compute_fp16_in_fp32", 1, compute_fp16_in_fp32, on_cpu},
      // Literals as weights, before the passes that look constants up (and the planner, which
      // would visit each Constant node again at every new input shape). CPU sessions: the
      // accelerator's placement keeps Constant nodes on the host as shape arithmetic, untried
      // with initializers in their place.
      {"constants_as_initializers", 1, constants_as_initializers, on_cpu},
      {"remove_identities", 1, remove_identities},
      {"eliminate_dead_nodes", 1, eliminate_dead_nodes},
      {"keep_sparse_weights", 1, keep_sparse_weights},
      // torch's EmbeddingBag Loops as one node (before the bodies get the passes, which
      // run after the main graph's).
      {"fuse_embedding_bag", 2, fuse_embedding_bag},
      // After the pass above, which recognizes the Loops by their shape arithmetic; before the
      // fusions, so that it sees ONNX's ops only. CPU sessions (untried on an accelerator).
      {"fold_shape_arithmetic", 1, fold_shape_arithmetic, on_cpu, /*main_graph_only=*/true},
      // Reads the graph inputs' declared shapes; before the attention fusion, which then reads
      // a decoder's keys and values as views of the one concatenation left.
      {"interchange_stacked_concats", 2, interchange_stacked_concats, nullptr,
       /*main_graph_only=*/true},
      {"fold_conv_batchnorm", 2, fold_conv_batchnorm},
      {"fold_pad_into_conv", 2, fold_pad_into_conv},
      // Before the layout passes, which keep pools (not ReduceMean) in the convolutions' layout.
      {"reduce_mean_as_global_pool", 2, reduce_mean_as_global_pool, on_cpu},
      // precision = int8 asks for it at every level: float layers in the form dynamic
      // quantizers write, which lower_quantized then puts on oneDNN's int8 primitives (before
      // the fusions, so their activations are still nodes lower_quantized takes in).
      {"quantize_at_load", 0, quantize_at_load,
       [](const SessionOptions& o) { return on_cpu(o) && o.precision == "int8"; }},
      // HardSwish and HardSigmoid written out as Add/Div/Clip/Mul chains: before the fusion
      // that takes them into the convolution.
      {"fold_clamped_gates", 2, fold_clamped_gates},
      // GELU written out (Erf and its constants) becomes one node before the convolutions take
      // activations in: wav2vec2's feature encoder puts one after each of its convolutions.
      {"fuse_gelu", 2, fuse_gelu},
      {"fuse_conv_activation", 2, fuse_conv_activation, on_cpu},
      // After the activation fusion: a split convolution's activation goes to its last part.
      {"distribute_channel_concat", 2, distribute_channel_concat, on_cpu},
      {"fuse_layer_norm", 2, fuse_layer_norm},
      // Quantized layers (ConvInteger, QLinearConv, QDQ around Conv/MatMul/Gemm, ...) onto
      // oneDNN's int8 primitives, taking in the activation the passes above recognized (GELU
      // written out, Relu fused into a QDQ Conv); before fuse_matmul_epilogue, which would take
      // a QDQ MatMul's bias and activation into the float MatMul.
      {"lower_quantized", 0, lower_quantized,
       [](const SessionOptions& o) {
         return on_cpu(o) && (o.optimization_level >= 1 || o.precision == "int8");
       }},
      // One node keeps the scores in cache (operators/cpu/attention.cpp) or, on an accelerator,
      // saves their round trips. On CPUs without AVX-512, and where a CPU session computes in
      // bf16 or fp16, MatMul and Softmax serve attention better.
      {"fuse_attention", 2, fuse_attention,
       [](const SessionOptions& o) {
         return !on_cpu(o) || (o.precision == "fp32" && cpu_has_avx512() && cpu_has_avx512f());
       }},
      {"fuse_matmul_epilogue", 2, fuse_matmul_epilogue, on_cpu},
      {"fold_transpose_into_matmul", 2, fold_transpose_into_matmul, on_cpu},
      // Before the layout pass, which keeps the one node channels-last (not the three).
      {"fuse_channel_shuffle", 2, fuse_channel_shuffle, on_cpu},
      // Channels-last between convolutions: oneDNN's preferred layout on the CPU, and the one
      // cuDNN's fp16 tensor-core convolutions read without transposing.
      {"use_channels_last", 2, use_channels_last,
       [](const SessionOptions& o) { return on_cpu(o) || o.precision == "fp16"; }},
      // Again, now that the Transposes between a MatMul and its epilogue in a channels-last
      // network are gone (ConvNeXt: MatMul -> Transpose to NCHW -> layer scale -> residual Add).
      {"fuse_matmul_epilogue_after_layout", 2, fuse_matmul_epilogue, on_cpu},
      {"prefer_winograd", 2, prefer_winograd,
       [](const SessionOptions& o) { return on_cpu(o) && o.winograd && o.precision == "fp32"; }},
      {"fuse_depthwise_block", 2, fuse_depthwise_block,
       [](const SessionOptions& o) { return on_cpu(o) && o.precision == "fp32"; }},
      // After the depthwise blocks (whose projection the gate keeps apart from them).
      {"fold_channel_scale_into_conv", 2, fold_channel_scale_into_conv,
       [](const SessionOptions& o) { return on_cpu(o) && o.precision == "fp32"; }},
      {"use_blocked_layout", 2, use_blocked_layout,
       [](const SessionOptions& o) { return on_cpu(o) && o.precision == "fp32"; }},
      // After the layout passes: it needs both nodes' stored layouts.
      {"fuse_conv_max_pool", 2, fuse_conv_max_pool,
       [](const SessionOptions& o) { return on_cpu(o) && o.precision == "fp32"; }},
      // At every level: bf16 is what the user asked for, not an optimization. Where oneDNN has
      // no bf16 kernels (before AVX-512) the layers compute in fp32 on its fp32 kernels: the
      // loops that would otherwise run them in bf16 are many times slower.
      {"use_bf16", 0, use_bf16,
       [](const SessionOptions& o) { return o.precision == "bf16" && cpu_has_bf16_kernels(); }},
      {"use_fp16", 0, [](const Graph& g) { return use_fp16(g, Fp16Weights::ConvertOnce); },
       [](const SessionOptions& o) { return o.precision == "fp16"; }},
      // What folding left unread (a BatchNorm's statistics, the unfolded weights).
      {"eliminate_dead_nodes_after_folding", 2, eliminate_dead_nodes},
  };
  return passes;
}

namespace {

Graph run_passes_on(const Graph& graph, const SessionOptions& options, bool main_graph) {
  Graph g = graph;
  for (const Pass& p : optimization_passes())
    if (options.optimization_level >= p.min_level && (!p.wanted || p.wanted(options)) &&
        (main_graph || !p.main_graph_only))
      g = p.apply(g);
  // If, Loop and Scan bodies get what the main graph gets (a speech model whose network sits in
  // the branches of an If ran them unfused). Weights they capture from the enclosing graph are
  // not constants to them, so what needs constant weights (folding, packing) stays outside.
  for (Node& n : g.nodes)
    for (auto& [key, a] : n.attributes) {
      if (a.type == Attribute::Type::Graph && a.g)
        a.g = std::make_shared<Graph>(run_passes_on(*a.g, options, false));
      if (a.type == Attribute::Type::Graphs)
        for (auto& body : a.graphs)
          if (body) body = std::make_shared<Graph>(run_passes_on(*body, options, false));
    }
  return g;
}

}  // namespace

Graph run_passes(const Graph& graph, const SessionOptions& options) {
  return run_passes_on(graph, options, true);
}

}  // namespace volt
