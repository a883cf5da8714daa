// LSTM at small batches on volt's own loop. At batch 1 a step's recurrent product is a matrix
// times one vector: R (4H x H) streams from L3 once a step (4 MiB at H = 512) and the work is
// that traffic, not arithmetic. oneDNN's LSTM primitive ran such a step in 54-63 us on two Zen 4
// threads (H = 512) where reading R split across them takes 32; ONNX Runtime's took 42. Here the
// input product runs once over the whole sequence (one sgemm), and each step splits the hidden
// units across the threads: a thread computes its units' four gate rows against every batch row
// (R read once a step whatever the batch), updates their cells, and writes its slice of h; one
// barrier a step. The two directions of a bidirectional node on two threads run apart, without
// barriers. Default activations only (the cell oneDNN also computes), any direction and layout,
// initial states, peepholes, sequence_lens; constant or fed weights, read as ONNX lays them out.
#pragma once
#include <cstdint>
#include <memory>

#include "operators/cpu/rnn_dnnl.hpp"
#include "operators/kernel.hpp"

namespace volt {

struct LstmRows;

// The own loop's plan for these shapes, or null where it does not take the node: not an LSTM
// of the default cell (RecurrentSpec::primitive_cell), not fp32, or a batch past kLstmRowsBatch
// (where oneDNN's gemm-based steps reuse R across the batch better).
std::shared_ptr<const LstmRows> plan_lstm_rows(InferContext& ctx, const RecurrentSpec& spec);
void run_lstm_rows(const LstmRows& plan, RunContext& ctx);

}  // namespace volt
