// Fuzz target: model bytes -> load -> plan -> run on small inputs. Any volt::Error is a fine
// answer; anything else (a crash, a sanitizer report, another exception, a hang) is a finding.
#include <cstdint>
#include <cstring>

#include "volt/volt.hpp"

namespace {

// Inputs the model declares, with unknown dimensions set to 1..2 and every tensor kept small,
// filled with values that are valid indices for most index-taking ops (0 and 1).
bool make_feeds(const volt::Session& session, volt::NamedValues& feeds) {
  for (const volt::ValueInfo& in : session.inputs()) {
    if (in.kind != volt::ValueInfo::Kind::Tensor || in.dtype == volt::DType::Undefined)
      return false;
    volt::Shape shape;
    int64_t numel = 1;
    if (in.has_shape)
      for (const volt::Dim& d : in.shape) {
        const int64_t v = d.is_fixed() ? d.value : 2;
        if (v > 4096) return false;
        shape.push_back(v);
        numel *= v;
        if (numel > 4096) return false;
      }
    volt::Tensor t = volt::Tensor::empty(in.dtype, shape);
    if (in.dtype != volt::DType::String) {
      auto* bytes = static_cast<uint8_t*>(t.raw());
      const size_t es = volt::dtype_size(in.dtype);
      for (int64_t i = 0; i < t.numel(); ++i) bytes[static_cast<size_t>(i) * es] = (i % 2) ? 1 : 0;
      if (in.dtype == volt::DType::Float)
        for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.5f * (i % 3);
    }
    feeds.emplace_back(in.name, volt::Value(t));
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  volt::SessionOptions options;
  options.threads = 1;
  options.memory_limit = size_t{256} << 20;
  options.plan_cache_size = 4;
  try {
    volt::Session session = volt::Session::from_bytes(data, size, options);
    volt::NamedValues feeds;
    if (!make_feeds(session, feeds)) return 0;
    volt::RunOptions run;
    run.timeout_ms = 2000;
    session.run(feeds, {}, run);
  } catch (const volt::Error&) {
  }
  return 0;
}
