// Gradient rules of RNN, GRU and LSTM: one ai.volt RecurrentGrad node (operators/cpu/rnn_grad.cpp)
// that recomputes the recurrence and backpropagates through time, to X, the weights, the biases,
// the initial states and LSTM's peepholes.
#include "operators/grad/gradient_rule.hpp"

namespace volt {
namespace {

GradientRule recurrent(const char* cell) {
  return [cell](GradEmitter& e) {
    const Node& n = e.node();
    const bool lstm = std::string(cell) == "LSTM";
    std::vector<std::string> ins(11);
    for (size_t i = 0; i < 8; ++i) ins[i] = e.input(i);
    for (size_t o = 0; o < (lstm ? 3u : 2u); ++o) ins[8 + o] = e.grad_of_output(o);
    std::map<std::string, Attribute> attrs = n.attributes;
    attrs["cell"] = string_attr(cell);
    const auto outs = e.emit("RecurrentGrad", ins, attrs, 7, kVoltDomain);
    // Input k's gradient is output slot[k] of RecurrentGrad (sequence_lens has none).
    const size_t slot[] = {0, 1, 2, 3, 7, 4, 5, 6};
    for (size_t k = 0; k < 8; ++k)
      if (k != 4 && e.needs_grad(k)) e.set_grad(k, outs[slot[k]]);
  };
}

}  // namespace

// ONNX's schemas mark X, W, R, B (and LSTM's P) differentiable; the initial states are too, for
// a model that learns them or feeds them from another network.
VOLT_REGISTER_GRADIENT_OF(rnn, "RNN", ({0, 1, 2, 3, 5}), recurrent("RNN"));
VOLT_REGISTER_GRADIENT_OF(gru, "GRU", ({0, 1, 2, 3, 5}), recurrent("GRU"));
VOLT_REGISTER_GRADIENT_OF(lstm, "LSTM", ({0, 1, 2, 3, 5, 6, 7}), recurrent("LSTM"));

}  // namespace volt
