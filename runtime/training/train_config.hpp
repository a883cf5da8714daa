// Training options, parsed from the key/value strings of the C and C++ APIs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "volt/volt.hpp"

namespace volt {

struct TrainConfig {
  std::string loss = "cross_entropy";  // cross_entropy | mse | model_output
  std::string prediction;              // "" = the first output
  std::string label = "label";
  std::string optimizer = "sgd";  // sgd | adam | adamw | adagrad
  double learning_rate = 0.01, momentum = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8,
         weight_decay = 0, max_grad_norm = 0;
  bool nesterov = false;
  std::vector<std::string> trainable, freeze;  // name prefixes
  int threads = 0;
  std::string device = "cpu", precision = "fp32";
  uint64_t seed = 0;
  // Embedding tables (weights read only by Gather on axis 0) get row-sparse gradients: the
  // touched rows, summed. Off: dense gradients everywhere (for comparison).
  bool sparse_gradients = true;
  // With row-sparse gradients, the optimizer updates only the touched rows (momentum and Adam
  // moments of other rows wait, as in PyTorch's SparseAdam); off applies the dense semantics.
  bool lazy_update = true;
  // N micro-batches (N calls of step) per optimizer step: their gradients are summed, and the
  // update uses their mean.
  int accumulate_steps = 1;
  // auto: several processes on MPI when launched by mpirun (Open MPI's or PMI's variables set);
  // off: one process; mpi: MPI always (one rank outside mpirun).
  std::string distributed = "auto";
  // Row-sparse gradients across ranks: exchanged as rows while their union covers at most this
  // fraction of the table, as a dense all-reduce of the table past it.
  double sparse_allreduce_threshold = 0.3;
};

// An unknown key or a bad value is an InvalidArgument error naming it.
TrainConfig parse_train_options(const TrainOptions& options);
// Checks one key/value pair (the C API checks each as it is set).
void apply_train_option(TrainConfig& config, const std::string& key, const std::string& value);
// The options every rank of a distributed job must share, as "key=value" lines in a fixed
// order (threads, device and distributed itself may differ between ranks).
std::string shared_options_text(const TrainConfig& config);

}  // namespace volt
