// Fuzz target: a sequence of C API calls chosen by the fuzzer's bytes, over a small pool of
// handles (tensors, options, a session, run options, a trainer) built from the bundled MLP.
// Every call must return a status (or a value) and leave the handles usable; the sanitizers
// catch the rest. Handles are only freed through the pool, so the target itself never misuses
// freed memory: what is fuzzed is argument validation and state, not use-after-free by design.
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "volt/volt.h"

namespace {

const std::string& model_path() {
  static const std::string path = std::string(VOLT_SOURCE_DIR) + "/models/mnist_mlp.onnx";
  return path;
}

const std::string& model_bytes() {
  static const std::string bytes = [] {
    std::ifstream in(model_path(), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }();
  return bytes;
}

constexpr std::array<int, 8> kDtypes = {VOLT_FLOAT, VOLT_INT64,  VOLT_INT32,   VOLT_UINT8,
                                        VOLT_BOOL,  VOLT_DOUBLE, VOLT_FLOAT16, 77};
constexpr std::array<int64_t, 7> kDims = {0, 1, 2, 3, 10, 784, -1};
const std::array<const char*, 12> kKeys = {
    "threads", "optimize",  "device",        "precision",  "memory_limit", "plan_cache_size",
    "loss",    "optimizer", "learning_rate", "timeout_ms", "bogus",        ""};
const std::array<const char*, 12> kValues = {
    "0", "1", "2", "-1", "cpu", "fp32", "cuda:0", "1e-3", "adam", "mse", "99999999999999999999",
    "x"};
const std::array<const char*, 5> kNames = {"x", "logits", "label", "", "nope"};

struct Pool {
  std::array<volt_tensor*, 6> tensors{};
  volt_options* options = nullptr;
  volt_session* session = nullptr;
  volt_run_options* run_options = nullptr;
  volt_train_options* train_options = nullptr;
  volt_trainer* trainer = nullptr;
  ~Pool() {
    for (auto* t : tensors) volt_tensor_free(t);
    volt_options_free(options);
    volt_session_free(session);
    volt_run_options_free(run_options);
    volt_train_options_free(train_options);
    volt_trainer_free(trainer);
  }
};

void create_tensor(volt::fuzz::ByteReader& in, Pool& pool) {
  const size_t slot = in.below(pool.tensors.size());
  const int dtype = kDtypes[in.below(kDtypes.size())];
  const size_t rank = in.below(4);
  std::vector<int64_t> shape;
  int64_t numel = 1;
  for (size_t i = 0; i < rank; ++i) {
    shape.push_back(kDims[in.below(kDims.size())]);
    numel *= shape.back() < 0 ? 0 : shape.back();
  }
  // The harness keeps its own buffers small (volt itself allocates what a caller asks for).
  if (numel > (1 << 20)) return;
  std::vector<uint8_t> data(static_cast<size_t>(numel) * 8 + 8);
  for (size_t i = 0; i < data.size() && !in.empty() && i < 64; ++i) data[i] = in.byte();
  volt_tensor* t = nullptr;
  const bool null_data = in.byte() == 0xff;
  if (volt_tensor_create(static_cast<volt_dtype>(dtype), shape.data(), rank,
                         null_data ? nullptr : data.data(), &t) == VOLT_OK) {
    volt_tensor_free(pool.tensors[slot]);
    pool.tensors[slot] = t;
  }
}

// Picks up to three tensors (possibly NULL) and names for them.
size_t pick_inputs(volt::fuzz::ByteReader& in, Pool& pool, std::vector<const char*>& names,
                   std::vector<const volt_tensor*>& values) {
  const size_t n = in.below(4);
  for (size_t i = 0; i < n; ++i) {
    names.push_back(kNames[in.below(kNames.size())]);
    values.push_back(pool.tensors[in.below(pool.tensors.size())]);
  }
  return n;
}

void step(volt::fuzz::ByteReader& in, Pool& pool) {
  switch (in.below(14)) {
    case 0:
      create_tensor(in, pool);
      break;
    case 1: {
      const size_t slot = in.below(pool.tensors.size());
      volt_tensor_free(pool.tensors[slot]);
      pool.tensors[slot] = nullptr;
      break;
    }
    case 2: {
      volt_tensor* t = pool.tensors[in.below(pool.tensors.size())];
      (void)volt_tensor_dtype(t);
      (void)volt_tensor_data(t);
      const int64_t* s = volt_tensor_shape(t);
      for (size_t i = 0; s && i < volt_tensor_rank(t); ++i) (void)s[i];
      break;
    }
    case 3:
      if (!pool.options) pool.options = volt_options_create();
      volt_options_set(pool.options, kKeys[in.below(kKeys.size())],
                       kValues[in.below(kValues.size())]);
      break;
    case 4: {
      volt_session* s = nullptr;
      const bool from_fuzz = in.byte() & 1;
      const std::string bytes = from_fuzz ? in.text(256) : model_bytes();
      if (volt_session_create_from_memory(bytes.data(), bytes.size(), pool.options, &s) ==
          VOLT_OK) {
        volt_session_free(pool.session);
        pool.session = s;
      }
      break;
    }
    case 5: {
      std::vector<const char*> names;
      std::vector<const volt_tensor*> values;
      const size_t n = pick_inputs(in, pool, names, values);
      const size_t n_out = in.below(3);
      std::vector<volt_tensor*> outs(n_out + 1, nullptr);
      const bool all = in.byte() & 1;
      const char* out_names[2] = {kNames[in.below(kNames.size())], "logits"};
      if (volt_session_run_with_options(pool.session, pool.run_options, n, names.data(),
                                        values.data(), n_out, all ? nullptr : out_names,
                                        outs.data()) == VOLT_OK)
        for (auto* t : outs) volt_tensor_free(t);
      break;
    }
    case 6:
      (void)volt_session_input_name(pool.session, in.below(3));
      (void)volt_session_output_name(pool.session, in.below(3));
      (void)volt_session_input_count(pool.session);
      break;
    case 7:
      if (!pool.run_options) pool.run_options = volt_run_options_create();
      if (in.byte() & 1)
        volt_run_options_set(pool.run_options, kKeys[in.below(kKeys.size())],
                             kValues[in.below(kValues.size())]);
      else if (in.byte() & 1)
        volt_run_options_cancel(pool.run_options);
      else
        volt_run_options_reset(pool.run_options);
      break;
    case 8:
      volt_session_free(pool.session);
      pool.session = nullptr;
      break;
    case 9:
      if (!pool.train_options) pool.train_options = volt_train_options_create();
      volt_train_options_set(pool.train_options, kKeys[in.below(kKeys.size())],
                             kValues[in.below(kValues.size())]);
      break;
    case 10: {
      volt_trainer* t = nullptr;
      const char* path = (in.byte() & 7) ? model_path().c_str() : "/nonexistent.onnx";
      if (volt_trainer_create(path, pool.train_options, &t) == VOLT_OK) {
        volt_trainer_free(pool.trainer);
        pool.trainer = t;
      }
      break;
    }
    case 11: {
      std::vector<const char*> names;
      std::vector<const volt_tensor*> values;
      const size_t n = pick_inputs(in, pool, names, values);
      float loss = 0;
      if (in.byte() & 1)
        volt_trainer_step(pool.trainer, n, names.data(), values.data(),
                          (in.byte() & 1) ? &loss : nullptr);
      else
        volt_trainer_evaluate(pool.trainer, n, names.data(), values.data(), &loss);
      break;
    }
    case 12:
      volt_trainer_set_learning_rate(pool.trainer, static_cast<float>(in.u32()) * 1e-9f);
      break;
    default: {
      std::vector<const char*> names;
      std::vector<const volt_tensor*> values;
      const size_t n = pick_inputs(in, pool, names, values);
      volt_tensor* out = nullptr;
      if (volt_trainer_predict(pool.trainer, n, names.data(), values.data(), 1, &out) == VOLT_OK)
        volt_tensor_free(out);
      break;
    }
  }
  (void)volt_last_error();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volt::fuzz::ByteReader in(data, size);
  Pool pool;
  for (int i = 0; i < 64 && !in.empty(); ++i) step(in, pool);
  return 0;
}
