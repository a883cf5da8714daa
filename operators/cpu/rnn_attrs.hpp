// The attributes of an RNN, GRU or LSTM node, read once for the forward kernel (rnn.cpp) and
// its gradient (rnn_grad.cpp): direction, layout, clip, the cell's options and its activations
// with their alpha/beta.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "operators/cpu/rnn_dnnl.hpp"
#include "runtime/error.hpp"
#include "runtime/graph.hpp"

namespace volt {

struct RecurrentAttrs {
  Cell cell = Cell::Lstm;
  int64_t hidden = 0;  // 0: from R
  float clip = 0;
  int64_t layout = 0;
  bool input_forget = false, linear_before_reset = false, reverse = false;
  int dirs = 1;
  // Per direction, the cell's activations in ONNX order (f, g, h for LSTM; f, g for GRU; f for
  // RNN), each with its (alpha, beta).
  std::vector<std::string> activations;
  std::vector<std::pair<float, float>> params;
  size_t per_dir() const { return cell == Cell::Rnn ? 1 : (cell == Cell::Gru ? 2 : 3); }
  int64_t gates() const { return cell == Cell::Rnn ? 1 : (cell == Cell::Gru ? 3 : 4); }
};

// Default alpha/beta of the activations that take them, used when the node gives none.
inline std::pair<float, float> default_activation_params(const std::string& name) {
  if (name == "LeakyRelu") return {0.01f, 0};
  if (name == "ThresholdedRelu") return {1.0f, 0};
  if (name == "HardSigmoid") return {0.2f, 0.5f};
  if (name == "Elu") return {1.0f, 0};
  if (name == "ScaledTanh" || name == "Affine") return {1.0f, 0};
  return {0, 0};
}

inline RecurrentAttrs recurrent_attrs(const Node& n, Cell cell) {
  RecurrentAttrs a;
  a.cell = cell;
  a.hidden = n.attr_int("hidden_size", 0);
  a.clip = n.attr_float("clip", 0);
  a.layout = n.attr_int("layout", 0);
  a.input_forget = n.attr_int("input_forget", 0) != 0;
  a.linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;
  const std::string dir = n.attr_string("direction", "forward");
  VOLT_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional", InvalidModel,
             n.describe() + ": unknown direction '" + dir + "'");
  a.reverse = dir == "reverse";
  a.dirs = dir == "bidirectional" ? 2 : 1;
  a.activations = n.attr_strings("activations");
  if (a.activations.empty()) {
    const std::vector<std::string> defaults =
        cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
        : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int d = 0; d < a.dirs; ++d)
      a.activations.insert(a.activations.end(), defaults.begin(), defaults.end());
  }
  VOLT_CHECK(a.activations.size() == a.per_dir() * static_cast<size_t>(a.dirs), InvalidModel,
             n.describe() + ": expected " + std::to_string(a.per_dir() * a.dirs) + " activations");
  const auto alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  for (const auto& name : a.activations) {
    auto [al, be] = default_activation_params(name);
    const bool takes_alpha = al != 0 || name == "Affine" || name == "ScaledTanh";
    if (takes_alpha && ai < alphas.size()) al = alphas[ai++];
    if ((name == "HardSigmoid" || name == "Affine" || name == "ScaledTanh") && bi < betas.size())
      be = betas[bi++];
    a.params.emplace_back(al, be);
  }
  return a;
}

// What oneDNN's RNN primitives need to know of the node, and whether they compute its cell:
// the default activations (Sigmoid for the gates, Tanh elsewhere; for RNN one of Tanh, Relu,
// Sigmoid in every direction), no clip, no input_forget.
inline RecurrentSpec recurrent_spec(const RecurrentAttrs& a) {
  RecurrentSpec spec{a.cell, a.hidden, a.dirs, a.reverse, a.layout, a.linear_before_reset,
                     false,  ""};
  if (a.clip != 0 || a.input_forget) return spec;
  const std::vector<std::string>& names = a.activations;
  if (a.cell == Cell::Rnn) {
    bool same = true;
    for (const auto& name : names) same = same && name == names[0];
    spec.primitive_cell =
        same && (names[0] == "Tanh" || names[0] == "Relu" || names[0] == "Sigmoid");
    spec.rnn_activation = names[0];
    return spec;
  }
  spec.primitive_cell = true;
  for (size_t i = 0; i < names.size(); ++i)
    spec.primitive_cell =
        spec.primitive_cell && names[i] == (i % a.per_dir() == 0 ? "Sigmoid" : "Tanh");
  return spec;
}

}  // namespace volt
