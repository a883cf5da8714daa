// SGD (momentum, Nesterov), Adam, AdamW and Adagrad over named parameters, updated in place. The
// update rules are those of the ai.onnx.preview.training ops (operators/common/optimizer_math.hpp).
#pragma once
#include <map>
#include <string>

#include "runtime/training/checkpoint.hpp"
#include "runtime/training/train_config.hpp"

namespace volt {

class Optimizer {
 public:
  explicit Optimizer(const TrainConfig& config) : c_(config) {}
  // `t` is the 1-based step number.
  void step(std::map<std::string, Tensor>& params, const std::map<std::string, Tensor>& grads,
            double lr, int64_t t);
  // The lazy update: only the touched rows of each table (and of its optimizer state) change.
  void step_rows(std::map<std::string, Tensor>& params,
                 const std::map<std::string, RowSparseTensor>& grads, double lr, int64_t t);
  void save(Checkpoint& c) const;
  // Restores state saved by save(); checks shapes against `params`.
  void load(const Checkpoint& c, const std::map<std::string, Tensor>& params,
            const std::string& source);

 private:
  Tensor& slot(const std::string& kind, const std::string& name, const Tensor& like);
  // The tensor the rule updates: x itself, or for a 16-bit x its fp32 master copy (x is then
  // rewritten from it after each update).
  Tensor& updated_copy(const std::string& name, Tensor& x);
  // The state tensors the configured rule keeps for a parameter (nullptr where none).
  std::pair<Tensor*, Tensor*> slots_for(const std::string& name, const Tensor& x);
  TrainConfig c_;
  std::map<std::string, std::map<std::string, Tensor>> state_;  // slot kind -> parameter -> state
};

}  // namespace volt
