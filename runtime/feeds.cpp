#include "runtime/feeds.hpp"

#include <algorithm>

#include "runtime/error.hpp"
#include "runtime/utf8.hpp"

namespace volt {

void check_feed(const ValueInfo& info, const Value& v, const std::string& source) {
  const std::string what = source + ": input '" + info.name + "'";
  const bool want_seq = info.kind == ValueInfo::Kind::Sequence;
  if (info.kind == ValueInfo::Kind::Optional) return;  // none, a tensor or a sequence
  VOLT_CHECK(!v.is_none(), InvalidArgument, what + " is empty, but it is not optional");
  VOLT_CHECK(want_seq == v.is_sequence(), InvalidArgument,
             what + (want_seq ? " must be a sequence" : " must be a tensor, got a sequence"));
  if (v.is_sequence()) return;
  // A CSR matrix may stand for any 2-D input of its element type (or a sparse_tensor input).
  const DType dtype = v.is_csr() ? v.csr().dtype() : v.tensor().dtype();
  const Shape shape = v.is_csr() ? v.csr().shape() : v.tensor().shape();
  VOLT_CHECK(v.is_csr() || v.tensor().defined(), InvalidArgument, what + " is an undefined tensor");
  VOLT_CHECK(!v.is_csr() || !info.has_shape || info.shape.size() == 2, InvalidArgument,
             what + " has shape " + info.describe() + ": a CSR matrix can only feed a 2-D input");
  VOLT_CHECK(info.dtype == DType::Undefined || dtype == info.dtype, InvalidArgument,
             what + " must be " + dtype_name(info.dtype) + ", got " + dtype_name(dtype));
  if (dtype == DType::String)
    for (int64_t i = 0; i < v.tensor().numel(); ++i)
      VOLT_CHECK(is_valid_utf8(v.tensor().data<std::string>()[i]), InvalidArgument,
                 what + ": string element " + std::to_string(i) + " is not valid UTF-8");
  if (!info.has_shape) return;
  bool ok = shape.size() == info.shape.size();
  for (size_t i = 0; ok && i < info.shape.size(); ++i)
    ok = !info.shape[i].is_fixed() || info.shape[i].value == shape[i];
  VOLT_CHECK(ok, InvalidArgument,
             what + " must have shape " + info.describe() + ", got " + shape_str(shape));
}

std::vector<const Value*> bind_feeds(const CompiledGraph& cg, const NamedValues& values,
                                     const std::string& source, std::vector<Value>& empties) {
  const Graph& g = *cg.graph;
  std::vector<const Value*> fed(cg.names.size(), nullptr);
  for (const auto& named : values) {
    const std::string& name = named.first;  // (clang 14 cannot capture structured bindings)
    const Value& value = named.second;
    auto it = std::find_if(g.inputs.begin(), g.inputs.end(),
                           [&](const ValueInfo& v) { return v.name == name; });
    if (it == g.inputs.end()) {
      std::string known;
      for (int id : cg.required_inputs) known += (known.empty() ? "" : ", ") + cg.names[id];
      fail(ErrorCode::InvalidArgument,
           source + ": unknown input '" + name + "' (the model's inputs are: " + known + ")");
    }
    check_feed(*it, value, source);
    const int id = cg.id(name);
    VOLT_CHECK(!fed[id], InvalidArgument, source + ": input '" + name + "' is given twice");
    fed[id] = &value;
  }
  empties.assign(cg.required_inputs.size(), Value());
  size_t e = 0;
  for (int id : cg.required_inputs) {
    if (fed[id]) continue;
    const auto& info = *std::find_if(g.inputs.begin(), g.inputs.end(),
                                     [&](const ValueInfo& v) { return v.name == cg.names[id]; });
    VOLT_CHECK(info.kind == ValueInfo::Kind::Optional, InvalidArgument,
               source + ": input '" + cg.names[id] + "' (" + info.describe() + ") is missing");
    fed[id] = &empties[e++];  // an omitted optional input is an empty optional
  }
  return fed;
}

}  // namespace volt
