// Channels-last activations. The channels_last pass stores the 4-D values between oneDNN
// convolutions and pools as N×H×W×C (the layout oneDNN's AVX-512 convolutions pick for
// themselves), so no reorder runs between them; the node attribute volt.layout = "NHWC" tells
// a Conv or pool kernel that its activation inputs and output are stored that way. The
// use_blocked_layout pass may then store such a region in oneDNN's blocks of channels instead
// (volt.layout = "NCHW16C" on AVX-512, "NCHW8C" on AVX2: the blocking oneDNN's own kernels use
// there). Shapes of such values are the stored channels-last ones ([N, H, W, C]); kernels reason
// on the logical [N, C, H, W].
#pragma once
#include <dnnl.hpp>

#include "operators/kernel.hpp"

namespace volt {

// How a node stores its 4-D activations (volt.layout): as the graph does (NCHW), channels-last
// (NHWC), or in oneDNN's nChw16c / nChw8c blocks (NCHW16C / NCHW8C: channels in blocks of 16 or
// 8, each block's channels innermost) held in a tensor of the channels-last shape, which has as
// many elements when the channels are a multiple of the block (use_blocked_layout sees to it).
enum class StoredLayout { ChannelsFirst, ChannelsLast, Blocked16, Blocked8 };
StoredLayout stored_layout(const Node& n);
// How the node stores its activation input X: volt.input_layout where set (NCHW for a region's
// first convolution, whose X comes from outside; a blocked layout for one at a blocked region's
// edge, whose own output is not in blocks), else as it stores its output.
StoredLayout stored_input_layout(const Node& n);
// The channels in one block of a blocked layout; 0 for the others.
int64_t block_channels(StoredLayout layout);
// volt.layout's name of the blocked layout with blocks of `channels` (16 or 8).
const char* blocked_layout_name(int64_t channels);

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

// oneDNN memory descriptor of a logical channels-first shape stored as `layout` says.
dnnl::memory::desc activation_md(const Shape& logical, dnnl::memory::data_type dt,
                                 StoredLayout layout);

// A stored activation as a channels-first tensor, and back (for the reference loops and the
// region's exits). `out` / `stored` are allocated with their shapes.
void read_channels_first(const Tensor& stored, StoredLayout layout, Tensor& out);
Tensor channels_first_copy(const Tensor& stored, StoredLayout layout);
void write_stored(const Tensor& channels_first, StoredLayout layout, Tensor& stored);

// Transpose's perm for an input of `rank`: reversed axes when `perm` is empty, negative axes
// normalized; InvalidArgument / InvalidModel naming the node when it is no permutation.
std::vector<int64_t> resolve_perm(const std::vector<int64_t>& perm, size_t rank, const Node& node);
// `shape` permuted (out[i] = shape[perm[i]]), and the strides that read a row-major value of
// `shape` in that order: the transposed view Transpose's reorder and MatMul's folded
// Transposes read.
Shape permuted_shape(const Shape& shape, const std::vector<int64_t>& perm);
std::vector<int64_t> permuted_strides(const Shape& shape, const std::vector<int64_t>& perm);
// The strides of a value of `dims` stored row-major as dims permuted by `perm` (stored axis j is
// logical axis perm[j]): where a product writes its result through a folded Transpose. Plain
// strides without a perm.
std::vector<int64_t> logical_strides(const Shape& dims, const std::vector<int64_t>& perm);

// out[i0, i1, …] = in[i_perm…]: out has the permuted shape of `in`. The one strided copy behind
// Transpose and the channels-last fallbacks.
void permute_into(const Tensor& in, const std::vector<int64_t>& perm, Tensor& out);
Tensor permuted(const Tensor& in, const std::vector<int64_t>& perm);

}  // namespace volt
