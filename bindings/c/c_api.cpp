// The C API, implemented only on the public C++ API. Every entry point catches everything:
// no exception crosses into C.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "volt/volt.h"
#include "volt/volt.hpp"

struct volt_tensor {
  volt::Tensor tensor;         // dense; or the values of `csr`
  std::vector<int64_t> shape;  // stable storage for volt_tensor_shape
  std::vector<const char*> strings;
  volt::CsrTensor csr;  // defined for CSR tensors
  volt::Value value() const { return csr.defined() ? volt::Value(csr) : volt::Value(tensor); }
};
struct volt_options {
  volt::SessionOptions options;
};
struct volt_session {
  volt::Session session;
};
struct volt_run_options {
  int64_t timeout_ms = 0;
  volt::CancelToken cancel;
};
struct volt_train_options {
  volt::TrainOptions options;
};
struct volt_trainer {
  volt::Trainer trainer;
};

namespace {

thread_local std::string g_last_error;

volt_status status_of(volt::ErrorCode c) {
  switch (c) {
    case volt::ErrorCode::InvalidArgument:
      return VOLT_ERR_INVALID_ARGUMENT;
    case volt::ErrorCode::InvalidModel:
      return VOLT_ERR_INVALID_MODEL;
    case volt::ErrorCode::NotImplemented:
      return VOLT_ERR_NOT_IMPLEMENTED;
    case volt::ErrorCode::Io:
      return VOLT_ERR_IO;
    case volt::ErrorCode::OutOfMemory:
      return VOLT_ERR_OUT_OF_MEMORY;
    case volt::ErrorCode::Runtime:
      return VOLT_ERR_RUNTIME;
    case volt::ErrorCode::Device:
      return VOLT_ERR_DEVICE;
    case volt::ErrorCode::Cancelled:
      return VOLT_ERR_CANCELLED;
    case volt::ErrorCode::Timeout:
      return VOLT_ERR_TIMEOUT;
  }
  return VOLT_ERR_RUNTIME;
}

volt_status set_error(volt_status s, const std::string& message) {
  g_last_error = message;
  return s;
}

// Runs f, mapping every exception to a status and a message.
template <class F>
volt_status guarded(F&& f) {
  try {
    f();
    return VOLT_OK;
  } catch (const volt::Error& e) {
    return set_error(status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return set_error(VOLT_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return set_error(VOLT_ERR_RUNTIME, e.what());
  } catch (...) {
    return set_error(VOLT_ERR_RUNTIME, "unknown error");
  }
}

// A decimal integer in [lo, hi], or an error naming the option.
int64_t parse_integer(const std::string& key, const char* value, int64_t lo, int64_t hi) {
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(value, &end, 10);
  if (end == value || *end != '\0' || errno == ERANGE || n < lo || n > hi)
    throw volt::Error(volt::ErrorCode::InvalidArgument,
                      "option '" + key + "': '" + value + "' is not an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return n;
}

volt_status null_arg(const char* what) {
  return set_error(VOLT_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

volt_tensor* wrap_tensor(volt::Tensor t) {
  auto* out = new volt_tensor{std::move(t), {}, {}};
  out->shape = out->tensor.shape();
  if (out->tensor.dtype() == volt::DType::String)
    for (int64_t i = 0; i < out->tensor.numel(); ++i)
      out->strings.push_back(out->tensor.data<std::string>()[i].c_str());
  return out;
}

// Wraps every output as a new C tensor, all or none.
void store_outputs(std::vector<volt::Value>& result, volt_tensor** outputs) {
  std::vector<volt_tensor*> made;
  try {
    for (auto& v : result) {
      if (!v.is_tensor())
        throw volt::Error(volt::ErrorCode::NotImplemented,
                          "an output is not a tensor; the C API returns tensors only");
      made.push_back(wrap_tensor(v.tensor()));
    }
  } catch (...) {
    for (auto* m : made) delete m;
    throw;
  }
  for (size_t i = 0; i < made.size(); ++i) outputs[i] = made[i];
}

}  // namespace

extern "C" {

const char* volt_version(void) {
  return volt::version();
}
const char* volt_last_error(void) {
  return g_last_error.c_str();
}

volt_status volt_tensor_create(volt_dtype dtype, const int64_t* shape, size_t rank,
                               const void* data, volt_tensor** out) {
  if (!out) return null_arg("out");
  *out = nullptr;
  if (rank > 0 && !shape) return null_arg("shape");
  if (!volt::dtype_is_valid(dtype))
    return set_error(VOLT_ERR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(dtype));
  if (rank > 64)
    return set_error(VOLT_ERR_INVALID_ARGUMENT, "rank " + std::to_string(rank) + " is over 64");
  return guarded([&] {
    volt::Shape s(shape, shape + rank);
    volt::Tensor t = volt::Tensor::empty(static_cast<volt::DType>(dtype), s);
    if (t.numel() > 0 && !data) throw volt::Error(volt::ErrorCode::InvalidArgument, "data is NULL");
    if (t.dtype() == volt::DType::String) {
      const auto* strs = static_cast<const char* const*>(data);
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (!strs[i])
          throw volt::Error(volt::ErrorCode::InvalidArgument,
                            "string element " + std::to_string(i) + " is NULL");
        t.data<std::string>()[i] = strs[i];
      }
    } else if (t.nbytes()) {
      std::memcpy(t.raw(), data, t.nbytes());
    }
    *out = wrap_tensor(std::move(t));
  });
}

volt_status volt_tensor_create_csr(volt_dtype dtype, int64_t rows, int64_t cols, int64_t nnz,
                                   const int64_t* row_offsets, const int64_t* col_indices,
                                   const void* values, volt_tensor** out) {
  if (!out) return null_arg("out");
  *out = nullptr;
  if (!volt::dtype_is_valid(dtype))
    return set_error(VOLT_ERR_INVALID_ARGUMENT, "unknown dtype " + std::to_string(dtype));
  return guarded([&] {
    volt::CsrTensor c = volt::CsrTensor::copy_of(static_cast<volt::DType>(dtype), rows, cols, nnz,
                                                 row_offsets, col_indices, values);
    auto* t = new volt_tensor{c.values(), {rows, cols}, {}, c};
    *out = t;
  });
}
int volt_tensor_is_csr(const volt_tensor* t) {
  return t && t->csr.defined() ? 1 : 0;
}
int64_t volt_tensor_csr_nnz(const volt_tensor* t) {
  return t && t->csr.defined() ? t->csr.nnz() : 0;
}
const int64_t* volt_tensor_csr_row_offsets(const volt_tensor* t) {
  return t && t->csr.defined() ? t->csr.row_offsets().data<int64_t>() : nullptr;
}
const int64_t* volt_tensor_csr_col_indices(const volt_tensor* t) {
  return t && t->csr.defined() ? t->csr.col_indices().data<int64_t>() : nullptr;
}

volt_dtype volt_tensor_dtype(const volt_tensor* t) {
  return t ? static_cast<volt_dtype>(t->tensor.dtype()) : VOLT_UNDEFINED;
}
size_t volt_tensor_rank(const volt_tensor* t) {
  return t ? t->shape.size() : 0;
}
const int64_t* volt_tensor_shape(const volt_tensor* t) {
  return t ? t->shape.data() : nullptr;
}
int64_t volt_tensor_numel(const volt_tensor* t) {
  if (t && t->csr.defined()) return t->csr.rows() * t->csr.cols();
  return t ? t->tensor.numel() : 0;
}
const void* volt_tensor_data(const volt_tensor* t) {
  if (!t) return nullptr;
  if (t->tensor.dtype() == volt::DType::String) return t->strings.data();
  return t->tensor.raw();
}
void volt_tensor_free(volt_tensor* t) {
  delete t;
}

volt_options* volt_options_create(void) {
  return new (std::nothrow) volt_options{};
}
void volt_options_free(volt_options* o) {
  delete o;
}

volt_status volt_options_set(volt_options* o, const char* key, const char* value) {
  if (!o) return null_arg("options");
  if (!key) return null_arg("key");
  if (!value) return null_arg("value");
  const std::string k = key, v = value;
  auto parse_int = [&](int lo, int hi) {
    return static_cast<int>(parse_integer(k, value, lo, hi));
  };
  return guarded([&] {
    if (k == "threads")
      o->options.threads = parse_int(0, 4096);
    else if (k == "optimize")
      o->options.optimization_level = parse_int(0, 2);
    else if (k == "memory_limit")
      o->options.memory_limit = static_cast<size_t>(parse_integer(k, value, 0, INT64_MAX));
    else if (k == "plan_cache_size")
      o->options.plan_cache_size = static_cast<size_t>(parse_integer(k, value, 1, 1 << 20));
    else if (k == "winograd") {
      if (v != "on" && v != "off")
        throw volt::Error(volt::ErrorCode::InvalidArgument,
                          "option 'winograd': '" + v + "' is not on or off");
      o->options.winograd = v == "on";
    } else if (k == "device") {
      if (v != "cpu" && v.rfind("cuda", 0) != 0)
        throw volt::Error(volt::ErrorCode::InvalidArgument,
                          "option 'device': '" + v + "' is not cpu or cuda:N");
      o->options.device = v;
    } else if (k == "precision") {
      if (v != "fp32" && v != "fp16" && v != "bf16" && v != "int8")
        throw volt::Error(volt::ErrorCode::InvalidArgument,
                          "option 'precision': '" + v + "' is not fp32, fp16, bf16 or int8");
      o->options.precision = v;
    } else {
      throw volt::Error(volt::ErrorCode::InvalidArgument,
                        "unknown option '" + k +
                            "' (known: threads, device, precision, optimize, memory_limit, "
                            "plan_cache_size, winograd)");
    }
  });
}

volt_status volt_session_create(const char* model_path, const volt_options* opts,
                                volt_session** out) {
  if (!out) return null_arg("out");
  *out = nullptr;
  if (!model_path) return null_arg("model_path");
  return guarded([&] {
    *out =
        new volt_session{volt::Session(model_path, opts ? opts->options : volt::SessionOptions{})};
  });
}

volt_status volt_session_create_from_memory(const void* bytes, size_t size,
                                            const volt_options* opts, volt_session** out) {
  if (!out) return null_arg("out");
  *out = nullptr;
  if (!bytes) return null_arg("bytes");
  return guarded([&] {
    *out = new volt_session{
        volt::Session::from_bytes(bytes, size, opts ? opts->options : volt::SessionOptions{})};
  });
}

size_t volt_session_input_count(const volt_session* s) {
  return s ? s->session.inputs().size() : 0;
}
size_t volt_session_output_count(const volt_session* s) {
  return s ? s->session.outputs().size() : 0;
}
const char* volt_session_input_name(const volt_session* s, size_t i) {
  return s && i < s->session.inputs().size() ? s->session.inputs()[i].name.c_str() : nullptr;
}
const char* volt_session_output_name(const volt_session* s, size_t i) {
  return s && i < s->session.outputs().size() ? s->session.outputs()[i].name.c_str() : nullptr;
}

volt_run_options* volt_run_options_create(void) {
  return new (std::nothrow) volt_run_options{};
}
void volt_run_options_free(volt_run_options* o) {
  delete o;
}
volt_status volt_run_options_set(volt_run_options* o, const char* key, const char* value) {
  if (!o) return null_arg("run options");
  if (!key) return null_arg("key");
  if (!value) return null_arg("value");
  return guarded([&] {
    const std::string k = key;
    if (k == "timeout_ms")
      o->timeout_ms = parse_integer(k, value, 0, INT64_MAX / 1000000);
    else
      throw volt::Error(volt::ErrorCode::InvalidArgument,
                        "unknown run option '" + k + "' (known: timeout_ms)");
  });
}
void volt_run_options_cancel(volt_run_options* o) {
  if (o) o->cancel.cancel();
}
void volt_run_options_reset(volt_run_options* o) {
  if (o) o->cancel.reset();
}

volt_status volt_session_run(volt_session* s, size_t n_inputs, const char* const* input_names,
                             const volt_tensor* const* inputs, size_t n_outputs,
                             const char* const* output_names, volt_tensor** outputs) {
  return volt_session_run_with_options(s, nullptr, n_inputs, input_names, inputs, n_outputs,
                                       output_names, outputs);
}

volt_status volt_session_run_with_options(volt_session* s, const volt_run_options* run_options,
                                          size_t n_inputs, const char* const* input_names,
                                          const volt_tensor* const* inputs, size_t n_outputs,
                                          const char* const* output_names, volt_tensor** outputs) {
  if (!s) return null_arg("session");
  if (n_inputs && (!input_names || !inputs)) return null_arg("input_names or inputs");
  if (n_outputs && !outputs) return null_arg("outputs");
  for (size_t i = 0; i < n_outputs; ++i) outputs[i] = nullptr;
  if (!output_names && n_outputs != s->session.outputs().size())
    return set_error(VOLT_ERR_INVALID_ARGUMENT,
                     "n_outputs is " + std::to_string(n_outputs) + ", the model has " +
                         std::to_string(s->session.outputs().size()) + " outputs");
  return guarded([&] {
    volt::NamedValues feeds;
    for (size_t i = 0; i < n_inputs; ++i) {
      if (!input_names[i])
        throw volt::Error(volt::ErrorCode::InvalidArgument,
                          "input_names[" + std::to_string(i) + "] is NULL");
      if (!inputs[i])
        throw volt::Error(volt::ErrorCode::InvalidArgument,
                          "inputs[" + std::to_string(i) + "] is NULL");
      feeds.emplace_back(input_names[i], inputs[i]->value());
    }
    std::vector<std::string> names;
    if (output_names)
      for (size_t i = 0; i < n_outputs; ++i) {
        if (!output_names[i])
          throw volt::Error(volt::ErrorCode::InvalidArgument,
                            "output_names[" + std::to_string(i) + "] is NULL");
        names.emplace_back(output_names[i]);
      }
    volt::RunOptions ro;
    if (run_options) {
      ro.timeout_ms = run_options->timeout_ms;
      ro.cancel = &run_options->cancel;
    }
    std::vector<volt::Value> result = s->session.run(feeds, names, ro);
    store_outputs(result, outputs);
  });
}

void volt_session_free(volt_session* s) {
  delete s;
}

// --- training
// ---------------------------------------------------------------------------------------
static volt_status feeds_of(size_t n, const char* const* names, const volt_tensor* const* values,
                            volt::NamedValues& out) {
  if (n && (!names || !values)) return null_arg("input_names or inputs");
  for (size_t i = 0; i < n; ++i) {
    if (!names[i])
      return set_error(VOLT_ERR_INVALID_ARGUMENT, "input_names[" + std::to_string(i) + "] is NULL");
    if (!values[i])
      return set_error(VOLT_ERR_INVALID_ARGUMENT, "inputs[" + std::to_string(i) + "] is NULL");
    out.emplace_back(names[i], values[i]->value());
  }
  return VOLT_OK;
}

volt_train_options* volt_train_options_create(void) {
  return new (std::nothrow) volt_train_options{};
}
void volt_train_options_free(volt_train_options* o) {
  delete o;
}

volt_status volt_train_options_set(volt_train_options* o, const char* key, const char* value) {
  if (!o) return null_arg("options");
  if (!key) return null_arg("key");
  if (!value) return null_arg("value");
  return guarded([&] {
    // Validated now, so the error comes from the call that set the bad value.
    volt::TrainOptions probe = o->options;
    probe.emplace_back(key, value);
    volt::validate_train_options(probe);
    o->options = std::move(probe);
  });
}

volt_status volt_trainer_create(const char* model_path, const volt_train_options* opts,
                                volt_trainer** out) {
  if (!out) return null_arg("out");
  *out = nullptr;
  if (!model_path) return null_arg("model_path");
  return guarded([&] {
    *out = new volt_trainer{volt::Trainer(model_path, opts ? opts->options : volt::TrainOptions{})};
  });
}

volt_status volt_trainer_step(volt_trainer* t, size_t n, const char* const* names,
                              const volt_tensor* const* inputs, float* loss) {
  if (!t) return null_arg("trainer");
  volt::NamedValues feeds;
  if (volt_status s = feeds_of(n, names, inputs, feeds); s != VOLT_OK) return s;
  return guarded([&] {
    const float l = t->trainer.step(feeds);
    if (loss) *loss = l;
  });
}

volt_status volt_trainer_evaluate(volt_trainer* t, size_t n, const char* const* names,
                                  const volt_tensor* const* inputs, float* loss) {
  if (!t) return null_arg("trainer");
  if (!loss) return null_arg("loss");
  volt::NamedValues feeds;
  if (volt_status s = feeds_of(n, names, inputs, feeds); s != VOLT_OK) return s;
  return guarded([&] { *loss = t->trainer.evaluate(feeds); });
}

volt_status volt_trainer_predict(volt_trainer* t, size_t n, const char* const* names,
                                 const volt_tensor* const* inputs, size_t n_outputs,
                                 volt_tensor** outputs) {
  if (!t) return null_arg("trainer");
  if (n_outputs && !outputs) return null_arg("outputs");
  for (size_t i = 0; i < n_outputs; ++i) outputs[i] = nullptr;
  volt::NamedValues feeds;
  if (volt_status s = feeds_of(n, names, inputs, feeds); s != VOLT_OK) return s;
  return guarded([&] {
    std::vector<volt::Value> result = t->trainer.predict(feeds);
    if (result.size() != n_outputs)
      throw volt::Error(volt::ErrorCode::InvalidArgument,
                        "n_outputs is " + std::to_string(n_outputs) + ", the model has " +
                            std::to_string(result.size()) + " outputs");
    store_outputs(result, outputs);
  });
}

volt_status volt_trainer_set_learning_rate(volt_trainer* t, float learning_rate) {
  if (!t) return null_arg("trainer");
  return guarded([&] { t->trainer.set_learning_rate(learning_rate); });
}

volt_status volt_trainer_loss_scale(const volt_trainer* t, float* scale, int64_t* skipped_steps) {
  if (!t) return null_arg("trainer");
  return guarded([&] {
    if (scale) *scale = t->trainer.loss_scale();
    if (skipped_steps) *skipped_steps = t->trainer.skipped_steps();
  });
}

volt_status volt_trainer_rank(const volt_trainer* t, int* rank, int* world) {
  if (!t) return null_arg("trainer");
  return guarded([&] {
    if (rank) *rank = t->trainer.rank();
    if (world) *world = t->trainer.world_size();
  });
}

volt_status volt_trainer_save_checkpoint(volt_trainer* t, const char* path) {
  if (!t) return null_arg("trainer");
  if (!path) return null_arg("path");
  return guarded([&] { t->trainer.save_checkpoint(path); });
}

volt_status volt_trainer_load_checkpoint(volt_trainer* t, const char* path) {
  if (!t) return null_arg("trainer");
  if (!path) return null_arg("path");
  return guarded([&] { t->trainer.load_checkpoint(path); });
}

volt_status volt_trainer_export(volt_trainer* t, const char* onnx_path) {
  if (!t) return null_arg("trainer");
  if (!onnx_path) return null_arg("onnx_path");
  return guarded([&] { t->trainer.export_model(onnx_path); });
}

void volt_trainer_free(volt_trainer* t) {
  delete t;
}

}  // extern "C"
