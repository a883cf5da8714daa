// LSTMs and GRUs at small batches on volt's own loop. At batch 1 a step's recurrent product is
// a matrix times one vector: R (GH x H) streams from L3 once a step (4 MiB for an LSTM of H = 512)
// and the work is that traffic, not arithmetic. oneDNN's LSTM primitive ran such a step in 54-63
// us on two Zen 4 threads (H = 512) where reading R split across them takes 32; ONNX Runtime's
// took 42. Here the input product runs once over the whole sequence (one sgemm), and each step
// splits the hidden units across the threads: a thread computes its units' gate rows against
// every batch row (R read once a step whatever the batch), updates their cells, and writes its
// slice of h; one barrier a step. The two directions of a bidirectional node on two threads run
// apart, without barriers. Default activations only (the cells oneDNN also computes); GRUs with
// linear_before_reset (PyTorch's export), whose gates all read h itself, in one direction (see
// plan_recurrent_rows); any direction and layout, initial states, LSTM peepholes, sequence_lens;
// constant or fed weights, read as ONNX lays them out.
#pragma once
#include <cstdint>
#include <memory>

#include "operators/cpu/rnn_dnnl.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct RecurrentRows;

// The own loop's plan for these shapes, or null where it does not take the node: an RNN, a GRU
// without linear_before_reset or of two directions, a cell other than the default
// (RecurrentSpec::primitive_cell), not fp32, or a batch past kRecurrentRowsBatch (where oneDNN's
// gemm-based steps reuse R across the batch better).
std::shared_ptr<const RecurrentRows> plan_recurrent_rows(InferContext& ctx,
                                                         const RecurrentSpec& spec);
void run_recurrent_rows(const RecurrentRows& plan, RunContext& ctx);

}  // namespace volt
