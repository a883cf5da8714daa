// Channels-last activations. The channels_last pass stores the 4-D values between oneDNN
// convolutions and pools as N×H×W×C (the layout oneDNN's AVX-512 convolutions pick for
// themselves), so no reorder runs between them; the node attribute volt.layout = "NHWC" tells
// a Conv or pool kernel that its activation inputs and output are stored that way. Shapes of
// such values are the stored ones ([N, H, W, C]); kernels reason on the logical [N, C, H, W].
#pragma once
#include <dnnl.hpp>

#include "operators/kernel.hpp"

namespace volt {

// Whether node `n` reads and writes channels-last activations.
bool channels_last(const Node& n);

// [N, C, d1, …] <-> [N, d1, …, C] (rank >= 3).
Shape to_channels_first(const Shape& channels_last_shape);
Shape to_channels_last(const Shape& channels_first_shape);

// The logical (channels-first) shape of a value a node stores as `last` says; a channels-last
// value of rank < 3 is an error naming the node.
Shape logical_shape(const Shape& stored, bool last, const Node& node);

// The permutation Transpose takes to turn a channels-first value of `rank` into channels-last,
// and back.
std::vector<int64_t> channels_last_perm(size_t rank);
std::vector<int64_t> channels_first_perm(size_t rank);

// oneDNN memory descriptor of a logical channels-first shape stored channels-last (or plain).
dnnl::memory::desc activation_md(const Shape& logical, dnnl::memory::data_type dt, bool last);

// out[i0, i1, …] = in[i_perm…]: out has the permuted shape of `in`. The one strided copy behind
// Transpose and the channels-last fallbacks.
void permute_into(const Tensor& in, const std::vector<int64_t>& perm, Tensor& out);
Tensor permuted(const Tensor& in, const std::vector<int64_t>& perm);

}  // namespace volt
