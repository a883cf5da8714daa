// RNN, GRU and LSTM on oneDNN's RNN primitives, for what they compute: fp32, the default
// activations (and Tanh, Relu or Sigmoid for RNN), no clip or input_forget, every sequence at
// full length; both directions, both layouts, initial states, LSTM peepholes,
// linear_before_reset GRU. Constant weights reordered once per plan into oneDNN's packed
// layout; weights fed at run time (training) reordered at each run. The gradient on oneDNN's
// backward primitives for the same cells.
#pragma once
#include <memory>
#include <string>

#include "operators/kernel.hpp"

namespace volt {

enum class Cell { Rnn, Gru, Lstm };

struct RecurrentSpec {
  Cell cell = Cell::Lstm;
  int64_t hidden = 0;  // 0: from R
  int dirs = 1;
  bool reverse = false;
  int64_t layout = 0;  // 1: batch-first
  bool linear_before_reset = false;
  // Whether oneDNN computes the cell: default activations (or a supported RNN one), no clip,
  // no input_forget. `rnn_activation`: the RNN's ("Tanh", "Relu", "Sigmoid").
  bool primitive_cell = false;
  std::string rnn_activation;
};

// The prepared primitive for these input shapes and constant weights; throws
// KernelUnsupported (with the reason) for what oneDNN does not compute.
std::shared_ptr<void> prepare_dnnl_recurrent(InferContext& ctx, const RecurrentSpec& spec);
void run_dnnl_recurrent(const void* state, RunContext& ctx, const RecurrentSpec& spec);

// The same for RecurrentGrad (operators/cpu/rnn_grad.cpp): oneDNN's forward-training and
// backward primitives, the forward recomputed with a workspace the backward reads; fp32.
std::shared_ptr<void> prepare_dnnl_recurrent_grad(InferContext& ctx, const RecurrentSpec& spec);
void run_dnnl_recurrent_grad(const void* state, RunContext& ctx, const RecurrentSpec& spec);

}  // namespace volt
