// Writes a model back to ONNX: the original ModelProto with its initializers replaced by given
// tensors (trained weights); a tensor named like a Constant node's output, or like an
// initializer of a subgraph, replaces that one instead. Weights over 1.5 GiB in all (by default) go
// to an external data file next to the model, since protobuf cannot hold more than 2 GiB. The model
// is written to a temporary file and renamed.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "loaders/loader.hpp"
#include "onnx/onnx_pb.h"
#include "runtime/error.hpp"

namespace volt {
namespace {

// Name, type and shape; the data too unless it goes to the external file.
void fill_proto(onnx::TensorProto& p, const std::string& name, const Tensor& t, bool data) {
  p.Clear();
  p.set_name(name);
  p.set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p.add_dims(d);
  if (t.dtype() == DType::String) {
    for (int64_t i = 0; i < t.numel(); ++i) p.add_string_data(t.data<std::string>()[i]);
  } else if (data) {
    p.set_raw_data(static_cast<const char*>(t.raw()), t.nbytes());
  }
}

void atomic_write(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    VOLT_CHECK(out, Io, path + ": cannot create " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    VOLT_CHECK(out.good(), Io, path + ": write failed");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    fail(ErrorCode::Io, path + ": cannot rename into place: " + std::strerror(errno));
  }
}

// Replaces, in `g` and its subgraphs, the Constant nodes and (below the main graph) the
// initializers named like an entry of `tensors`; records the names replaced.
void replace_nested(onnx::GraphProto& g, const std::map<std::string, Tensor>& tensors, bool top,
                    std::set<std::string>& replaced) {
  if (!top)
    for (auto& p : *g.mutable_initializer()) {
      auto it = tensors.find(p.name());
      if (it == tensors.end()) continue;
      const std::string name = p.name();  // fill_proto clears p
      fill_proto(p, name, it->second, true);
      replaced.insert(p.name());
    }
  for (auto& n : *g.mutable_node()) {
    const bool constant = n.op_type() == "Constant" &&
                          (n.domain().empty() || n.domain() == "ai.onnx") && n.output_size() == 1;
    for (auto& a : *n.mutable_attribute()) {
      if (constant && a.name() == "value" && a.has_t()) {
        auto it = tensors.find(n.output(0));
        if (it != tensors.end()) {
          const std::string name = a.t().name();
          fill_proto(*a.mutable_t(), name, it->second, true);
          replaced.insert(n.output(0));
        }
      }
      if (a.has_g()) replace_nested(*a.mutable_g(), tensors, false, replaced);
      for (auto& sg : *a.mutable_graphs()) replace_nested(sg, tensors, false, replaced);
    }
  }
}

}  // namespace

void write_model_with_weights(const std::string& original_bytes, const std::string& source,
                              const std::map<std::string, Tensor>& initializers,
                              const std::string& out_path, size_t external_above) {
  onnx::ModelProto proto;
  VOLT_CHECK(proto.ParseFromString(original_bytes), InvalidModel,
             source + ": cannot re-read the model to export it");
  auto* g = proto.mutable_graph();
  // Values the trainer took from Constant nodes or from subgraphs go back there; the rest are
  // the main graph's initializers.
  std::set<std::string> nested;
  replace_nested(*g, initializers, true, nested);
  std::set<std::string> main_names;
  for (const auto& p : g->initializer()) main_names.insert(p.name());
  for (const auto& s : g->sparse_initializer()) main_names.insert(s.values().name());
  std::map<std::string, Tensor> main;
  for (const auto& [name, t] : initializers)
    if (!nested.count(name) || main_names.count(name)) main[name] = t;
  size_t total = 0;
  for (const auto& [_, t] : main) total += t.nbytes();
  const bool external = total > external_above;
  const std::filesystem::path out(out_path);
  const std::string data_name = out.filename().string() + ".data";
  std::ofstream data;
  if (external) {
    data.open(
        (out.has_parent_path() ? out.parent_path() / data_name : std::filesystem::path(data_name))
            .string(),
        std::ios::binary | std::ios::trunc);
    VOLT_CHECK(data, Io, out_path + ": cannot create the external data file " + data_name);
  }
  // Dense initializers replace the sparse ones they came from.
  google::protobuf::RepeatedPtrField<onnx::SparseTensorProto> kept_sparse;
  for (const auto& s : g->sparse_initializer())
    if (!main.count(s.values().name())) *kept_sparse.Add() = s;
  *g->mutable_sparse_initializer() = std::move(kept_sparse);
  g->clear_initializer();
  int64_t offset = 0;
  for (const auto& [name, t] : main) {
    onnx::TensorProto* p = g->add_initializer();
    const bool to_file = external && t.dtype() != DType::String;
    fill_proto(*p, name, t, !to_file);
    if (to_file) {
      // Each tensor starts on a 64-byte boundary, so a loader that maps the file can use the
      // weights where they lie.
      const int64_t aligned = (offset + 63) / 64 * 64;
      if (aligned > offset) {
        const char zeros[64] = {};
        data.write(zeros, aligned - offset);
        offset = aligned;
      }
      data.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
      p->set_data_location(onnx::TensorProto::EXTERNAL);
      auto add = [&](const std::string& k, const std::string& v) {
        auto* e = p->add_external_data();
        e->set_key(k);
        e->set_value(v);
      };
      add("location", data_name);
      add("offset", std::to_string(offset));
      add("length", std::to_string(t.nbytes()));
      offset += static_cast<int64_t>(t.nbytes());
    }
  }
  if (external) {
    data.flush();
    VOLT_CHECK(data.good(), Io, out_path + ": writing external data failed");
  }
  std::string bytes;
  VOLT_CHECK(proto.SerializeToString(&bytes), Io, out_path + ": cannot serialize the model");
  atomic_write(out_path, bytes);
}

}  // namespace volt
