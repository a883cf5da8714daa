#include "runtime/training/train_config.hpp"

#include <cmath>
#include <sstream>

#include "runtime/error.hpp"

namespace volt {
namespace {

double number(const std::string& key, const std::string& value, double lo, double hi) {
  try {
    size_t used = 0;
    const double v = std::stod(value, &used);
    if (used == value.size() && std::isfinite(v) && v >= lo && v <= hi) return v;
  } catch (const std::exception&) {
  }
  fail(ErrorCode::InvalidArgument, "training option '" + key + "': '" + value +
                                       "' is not a number in [" + std::to_string(lo) + ", " +
                                       std::to_string(hi) + "]");
}

bool boolean(const std::string& key, const std::string& value) {
  if (value == "1" || value == "true" || value == "on") return true;
  if (value == "0" || value == "false" || value == "off") return false;
  fail(ErrorCode::InvalidArgument,
       "training option '" + key + "': '" + value + "' is not on/off, true/false or 1/0");
}

std::vector<std::string> prefixes(const std::string& value) {
  std::vector<std::string> out;
  std::stringstream ss(value);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

void one_of(const std::string& key, const std::string& value,
            std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return;
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  fail(ErrorCode::InvalidArgument,
       "training option '" + key + "': '" + value + "' is not one of " + list);
}

}  // namespace

void apply_train_option(TrainConfig& c, const std::string& key, const std::string& value) {
  if (key == "loss")
    one_of(key, value, {"cross_entropy", "mse", "model_output"}), c.loss = value;
  else if (key == "prediction")
    c.prediction = value;
  else if (key == "label") {
    VOLT_CHECK(!value.empty(), InvalidArgument, "training option 'label' cannot be empty");
    c.label = value;
  } else if (key == "optimizer")
    one_of(key, value, {"sgd", "adam", "adamw", "adagrad"}), c.optimizer = value;
  else if (key == "learning_rate")
    c.learning_rate = number(key, value, 0, 1e6);
  else if (key == "momentum")
    c.momentum = number(key, value, 0, 1);
  else if (key == "nesterov")
    c.nesterov = boolean(key, value);
  else if (key == "beta1")
    c.beta1 = number(key, value, 0, 0.999999999);
  else if (key == "beta2")
    c.beta2 = number(key, value, 0, 0.999999999);
  else if (key == "epsilon")
    c.epsilon = number(key, value, 0, 1);
  else if (key == "weight_decay")
    c.weight_decay = number(key, value, 0, 1e6);
  else if (key == "max_grad_norm")
    c.max_grad_norm = number(key, value, 0, 1e30);
  else if (key == "trainable")
    c.trainable = prefixes(value);
  else if (key == "freeze")
    c.freeze = prefixes(value);
  else if (key == "threads")
    c.threads = static_cast<int>(number(key, value, 0, 4096));
  else if (key == "device")
    c.device = value;
  else if (key == "precision")
    one_of(key, value, {"fp32", "mixed_fp16"}), c.precision = value;
  else if (key == "seed")
    c.seed = static_cast<uint64_t>(number(key, value, 0, 9.0e15));
  else if (key == "sparse_gradients")
    one_of(key, value, {"auto", "off"}), c.sparse_gradients = value == "auto";
  else if (key == "lazy_update")
    c.lazy_update = boolean(key, value);
  else if (key == "accumulate_steps")
    c.accumulate_steps = static_cast<int>(number(key, value, 1, 1 << 20));
  else if (key == "distributed")
    one_of(key, value, {"auto", "off", "mpi"}), c.distributed = value;
  else if (key == "sparse_allreduce_threshold")
    c.sparse_allreduce_threshold = number(key, value, 0, 1);
  else
    fail(ErrorCode::InvalidArgument, "unknown training option '" + key +
                                         "' (known: loss, prediction, label, optimizer, "
                                         "learning_rate, momentum, nesterov, beta1, beta2, "
                                         "epsilon, weight_decay, max_grad_norm, trainable, freeze, "
                                         "threads, device, precision, seed, sparse_gradients, "
                                         "lazy_update, accumulate_steps, distributed, "
                                         "sparse_allreduce_threshold)");
}

std::string shared_options_text(const TrainConfig& c) {
  std::ostringstream o;
  o.precision(17);
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& p : v) s += (s.empty() ? "" : ",") + p;
    return s;
  };
  o << "loss=" << c.loss << "\nprediction=" << c.prediction << "\nlabel=" << c.label
    << "\noptimizer=" << c.optimizer << "\nlearning_rate=" << c.learning_rate
    << "\nmomentum=" << c.momentum << "\nnesterov=" << c.nesterov << "\nbeta1=" << c.beta1
    << "\nbeta2=" << c.beta2 << "\nepsilon=" << c.epsilon << "\nweight_decay=" << c.weight_decay
    << "\nmax_grad_norm=" << c.max_grad_norm << "\ntrainable=" << list(c.trainable)
    << "\nfreeze=" << list(c.freeze) << "\nprecision=" << c.precision << "\nseed=" << c.seed
    << "\nsparse_gradients=" << c.sparse_gradients << "\nlazy_update=" << c.lazy_update
    << "\naccumulate_steps=" << c.accumulate_steps
    << "\nsparse_allreduce_threshold=" << c.sparse_allreduce_threshold << "\n";
  return o.str();
}

TrainConfig parse_train_options(const TrainOptions& options) {
  TrainConfig c;
  for (const auto& [k, v] : options) apply_train_option(c, k, v);
  return c;
}

}  // namespace volt

namespace volt {
void validate_train_options(const TrainOptions& options) {
  parse_train_options(options);
}
}  // namespace volt
