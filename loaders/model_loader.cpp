// ModelProto -> Model: parsing, opset imports, the ONNX checker where it applies, graph
// conversion (subgraphs included) and inlining of model-local functions.
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <unordered_map>
#include <utility>

#include "loaders/function_inliner.hpp"
#include "loaders/initializer_bytes.hpp"
#include "loaders/loader.hpp"
#include "loaders/model_file.hpp"
#include "loaders/proto_convert.hpp"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "runtime/error.hpp"

namespace volt {
namespace fs = std::filesystem;

namespace {

// What Debian's libonnx 1.12 knows; above these the checker and its shape inference are skipped.
constexpr int64_t kCheckerMaxIr = 8;
const std::map<std::string, int64_t> kCheckerMaxOpset = {
    {kOnnxDomain, 17}, {"ai.onnx.ml", 3}, {"ai.onnx.training", 1}, {"ai.onnx.preview.training", 1}};
// Versions that exist at all (ONNX 1.18 defines ai.onnx 23; leave room for what follows).
const std::map<std::string, int64_t> kMaxKnownOpset = {
    {kOnnxDomain, 25}, {"ai.onnx.ml", 5}, {"ai.onnx.preview.training", 1}, {"ai.onnx.training", 1}};

struct LoadContext {
  std::string source;
  ExternalData* external;
  std::map<std::string, int64_t> opsets;
  int unnamed = 0;
  // The main graph's initializer bytes cut from the message (initializer_bytes.hpp), or null;
  // the first graph_from_proto (the main graph's) takes it.
  const CutSource* cut = nullptr;
};

Attribute attribute_from_proto(const onnx::AttributeProto& a, const Node& node, LoadContext& ctx);
std::shared_ptr<Graph> graph_from_proto(const onnx::GraphProto& g, LoadContext& ctx);

std::string where(const LoadContext& ctx) {
  return ctx.source + ": ";
}

Attribute attribute_from_proto(const onnx::AttributeProto& a, const Node& node, LoadContext& ctx) {
  Attribute out;
  const std::string what = where(ctx) + node.describe() + ": attribute '" + a.name() + "'";
  using A = onnx::AttributeProto;
  A::AttributeType type = a.type();
  if (type == A::UNDEFINED) {  // very old models leave the type out: infer it from the filled field
    if (a.has_f())
      type = A::FLOAT;
    else if (a.has_i())
      type = A::INT;
    else if (a.has_s())
      type = A::STRING;
    else if (a.has_t())
      type = A::TENSOR;
    else if (a.has_g())
      type = A::GRAPH;
    else if (a.floats_size())
      type = A::FLOATS;
    else if (a.ints_size())
      type = A::INTS;
    else if (a.strings_size())
      type = A::STRINGS;
    else
      fail(ErrorCode::InvalidModel, what + " has no type and no value");
  }
  switch (type) {
    case A::FLOAT:
      out.type = Attribute::Type::Float;
      out.f = a.f();
      break;
    case A::INT:
      out.type = Attribute::Type::Int;
      out.i = a.i();
      break;
    case A::STRING:
      out.type = Attribute::Type::String;
      out.s = a.s();
      break;
    case A::TENSOR:
      out.type = Attribute::Type::Tensor;
      out.t = tensor_from_proto(a.t(), ctx.external, what);
      break;
    case A::GRAPH:
      out.type = Attribute::Type::Graph;
      out.g = graph_from_proto(a.g(), ctx);
      break;
    case A::FLOATS:
      out.type = Attribute::Type::Floats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case A::INTS:
      out.type = Attribute::Type::Ints;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case A::STRINGS:
      out.type = Attribute::Type::Strings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case A::TENSORS:
      out.type = Attribute::Type::Tensors;
      for (const auto& t : a.tensors())
        out.tensors.push_back(tensor_from_proto(t, ctx.external, what));
      break;
    case A::GRAPHS:
      out.type = Attribute::Type::Graphs;
      for (const auto& g : a.graphs()) out.graphs.push_back(graph_from_proto(g, ctx));
      break;
    case A::TYPE_PROTO:
      out.type = Attribute::Type::TypeProto;
      out.type_proto = value_info_from_proto("", a.tp());
      break;
    default:
      fail(ErrorCode::NotImplemented, what + " has an attribute type volt does not read");
  }
  return out;
}

// Which inputs share a type variable in the op's schema (see Node::input_type_group).
std::vector<int8_t> input_type_groups(const Node& node) {
  if (node.domain != kOnnxDomain && node.domain != "ai.onnx.ml") return {};
  const auto* schema = onnx::OpSchemaRegistry::Schema(
      node.op_type, node.opset, node.domain == kOnnxDomain ? "" : node.domain);
  if (!schema || schema->inputs().empty()) return {};
  const auto& formals = schema->inputs();
  std::map<std::string, int8_t> group_of;
  std::vector<int8_t> groups(node.inputs.size(), -1);
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const size_t f = std::min(i, formals.size() - 1);
    const auto& formal = formals[f];
    if (i >= formals.size() &&
        (formal.GetOption() != onnx::OpSchema::Variadic || !formal.GetIsHomogeneous()))
      continue;
    const std::string& type = formal.GetTypeStr();
    bool variable = false;  // or a concrete type such as tensor(int64)
    for (const auto& c : schema->typeConstraintParams()) variable |= c.type_param_str == type;
    if (!variable) continue;
    auto it = group_of.emplace(type, static_cast<int8_t>(group_of.size())).first;
    groups[i] = it->second;
  }
  return groups;
}

Node node_from_proto(const onnx::NodeProto& n, LoadContext& ctx) {
  Node node;
  node.op_type = n.op_type();
  node.domain = canonical_domain(n.domain());
  node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(ctx.unnamed++) : n.name();
  VOLT_CHECK(!node.op_type.empty(), InvalidModel, where(ctx) + node.describe() + " has no op_type");
  auto it = ctx.opsets.find(node.domain);
  VOLT_CHECK(it != ctx.opsets.end(), InvalidModel,
             where(ctx) + node.describe() + " uses domain '" + node.domain +
                 "', which the model does not import");
  node.opset = static_cast<int>(it->second);
  node.inputs.assign(n.input().begin(), n.input().end());
  node.input_type_group = input_type_groups(node);
  node.outputs.assign(n.output().begin(), n.output().end());
  for (const auto& a : n.attribute()) {
    VOLT_CHECK(!a.name().empty(), InvalidModel,
               where(ctx) + node.describe() + " has an attribute with no name");
    VOLT_CHECK(a.ref_attr_name().empty(), InvalidModel,
               where(ctx) + node.describe() + ": attribute '" + a.name() +
                   "' refers to a function attribute outside a function");
    // volt.* attributes are how graph passes talk to kernels (fused activations, layouts); a
    // model may not set them.
    VOLT_CHECK(a.name().rfind("volt.", 0) != 0, InvalidModel,
               where(ctx) + node.describe() + ": attribute '" + a.name() +
                   "' uses the prefix volt., which is reserved for volt's own passes");
    VOLT_CHECK(node.attributes.emplace(a.name(), attribute_from_proto(a, node, ctx)).second,
               InvalidModel,
               where(ctx) + node.describe() + ": attribute '" + a.name() + "' is given twice");
  }
  return node;
}

std::shared_ptr<Graph> graph_from_proto(const onnx::GraphProto& g, LoadContext& ctx) {
  auto graph = std::make_shared<Graph>();
  graph->name = g.name();
  const CutSource* cut = std::exchange(ctx.cut, nullptr);
  size_t next_cut = 0;
  for (int i = 0; i < g.initializer_size(); ++i) {
    const onnx::TensorProto& t = g.initializer(i);
    VOLT_CHECK(!t.name().empty(), InvalidModel, where(ctx) + "an initializer has no name");
    std::optional<std::string_view> cut_bytes;
    if (cut && next_cut < cut->cuts.size() &&
        cut->cuts[next_cut].initializer == static_cast<size_t>(i)) {
      const CutBytes& c = cut->cuts[next_cut++];
      cut_bytes = std::string_view(cut->base + c.offset, c.size);
    }
    Tensor value = tensor_from_proto(t, ctx.external, where(ctx) + "initializer '" + t.name() + "'",
                                     cut_bytes);
    if (cut_bytes && cut->file_pages) let_go_of_file_pages(*cut_bytes);
    VOLT_CHECK(graph->initializers.emplace(t.name(), std::move(value)).second, InvalidModel,
               where(ctx) + "initializer '" + t.name() + "' is defined twice");
    // The loader owns the proto and is its last reader: free each weight's bytes once copied,
    // so a model's weights are not held twice while it loads.
    std::string().swap(*const_cast<onnx::TensorProto&>(t).mutable_raw_data());
  }
  for (const auto& s : g.sparse_initializer()) {
    // COO -> dense, and for 2-D float weights also CSR (for passes/keep_sparse_weights).
    const std::string what = where(ctx) + "sparse initializer '" + s.values().name() + "'";
    Tensor values = tensor_from_proto(s.values(), ctx.external, what);
    Tensor indices = tensor_from_proto(s.indices(), ctx.external, what + " indices");
    Shape dense(s.dims().begin(), s.dims().end());
    const int64_t n = numel_of(dense);
    VOLT_CHECK(values.rank() == 1, InvalidModel, what + ": values must be 1-D");
    VOLT_CHECK(indices.dtype() == DType::Int64, InvalidModel, what + ": indices must be int64");
    const int64_t nnz = values.numel();
    const bool linear = indices.rank() == 1;
    VOLT_CHECK(
        (linear && indices.dim(0) == nnz) || (indices.rank() == 2 && indices.dim(0) == nnz &&
                                              indices.dim(1) == static_cast<int64_t>(dense.size())),
        InvalidModel,
        what + ": indices shape " + shape_str(indices.shape()) + " does not match " +
            std::to_string(nnz) + " values");
    Tensor out = Tensor::empty(values.dtype(), dense);
    const auto* idx = indices.data<int64_t>();
    const size_t es = dtype_size(values.dtype());
    for (int64_t k = 0; k < nnz; ++k) {
      int64_t flat = 0;
      if (linear) {
        flat = idx[k];
      } else {
        for (size_t d = 0; d < dense.size(); ++d) {
          const int64_t c = idx[k * dense.size() + d];
          VOLT_CHECK(c >= 0 && c < dense[d], InvalidModel, what + ": index out of range");
          flat = flat * dense[d] + c;
        }
      }
      VOLT_CHECK(flat >= 0 && flat < n, InvalidModel,
                 what + ": index " + std::to_string(flat) + " out of range");
      std::memcpy(static_cast<char*>(out.raw()) + flat * es,
                  static_cast<const char*>(values.raw()) + k * es, es);
    }
    if (dense.size() == 2 && out.dtype() == DType::Float)
      graph->sparse_initializers[s.values().name()] = CsrTensor::from_dense(out);
    VOLT_CHECK(graph->initializers.emplace(s.values().name(), std::move(out)).second, InvalidModel,
               what + " is defined twice");
  }
  for (const auto& v : g.input())
    graph->inputs.push_back(value_info_from_proto(v.name(), v.type()));
  for (const auto& v : g.output())
    graph->outputs.push_back(value_info_from_proto(v.name(), v.type()));
  for (const auto& v : g.value_info())
    graph->value_info.push_back(value_info_from_proto(v.name(), v.type()));
  graph->nodes.reserve(g.node_size());
  for (const auto& n : g.node()) graph->nodes.push_back(node_from_proto(n, ctx));
  return graph;
}

bool checker_applies(const onnx::ModelProto& m, const std::map<std::string, int64_t>& opsets) {
  if (m.ir_version() > kCheckerMaxIr) return false;
  for (const auto& [domain, version] : opsets) {
    auto it = kCheckerMaxOpset.find(domain);
    if (it == kCheckerMaxOpset.end() || version > it->second) return false;
  }
  return true;
}

// Ops of the ONNX domains that no schema defines get volt's own message, before the checker.
void check_ops_exist(const onnx::GraphProto& g, const std::map<std::string, int64_t>& opsets,
                     const std::set<std::string>& local_functions, const std::string& source) {
  for (const auto& n : g.node()) {
    const std::string domain = canonical_domain(n.domain());
    if (local_functions.count(domain + ":" + n.op_type())) continue;
    auto it = opsets.find(domain);
    // Only where libonnx knows the opset: newer ops are judged by volt's registry instead.
    auto known = kCheckerMaxOpset.find(domain);
    if ((domain == kOnnxDomain || domain == "ai.onnx.ml") && it != opsets.end() &&
        known != kCheckerMaxOpset.end() && it->second <= known->second) {
      const auto* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(it->second),
                                                          domain == kOnnxDomain ? "" : domain);
      VOLT_CHECK(schema, InvalidModel,
                 source + ": node '" + n.name() + "' (" + n.op_type() + "): unknown op '" +
                     n.op_type() + "' in domain " + domain + " at opset " +
                     std::to_string(it->second));
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) check_ops_exist(a.g(), opsets, local_functions, source);
      for (const auto& sg : a.graphs()) check_ops_exist(sg, opsets, local_functions, source);
    }
  }
}

Model convert(onnx::ModelProto& proto, const std::string& source, const std::string& base_dir,
              const CutSource* cut = nullptr) {
  Model model;
  model.source = source;
  model.ir_version = proto.ir_version();
  model.producer_name = proto.producer_name();
  model.producer_version = proto.producer_version();
  model.domain = proto.domain();
  model.model_version = proto.model_version();
  model.doc_string = proto.doc_string();
  model.graph_doc_string = proto.graph().doc_string();
  for (const auto& p : proto.metadata_props()) model.metadata_props[p.key()] = p.value();
  VOLT_CHECK(proto.has_graph(), InvalidModel, source + ": not an ONNX model (no graph)");
  VOLT_CHECK(proto.ir_version() >= 1, InvalidModel,
             source + ": not an ONNX model (ir_version missing)");
  for (const auto& op : proto.opset_import()) {
    const std::string domain = canonical_domain(op.domain());
    VOLT_CHECK(op.version() >= 1, InvalidModel,
               source + ": opset version " + std::to_string(op.version()) + " of domain " + domain +
                   " does not exist");
    auto known = kMaxKnownOpset.find(domain);
    VOLT_CHECK(known == kMaxKnownOpset.end() || op.version() <= known->second, InvalidModel,
               source + ": opset version " + std::to_string(op.version()) + " of domain " + domain +
                   " does not exist (the newest known is " + std::to_string(known->second) + ")");
    VOLT_CHECK(model.opsets.emplace(domain, op.version()).second, InvalidModel,
               source + ": domain " + domain + " is imported twice");
  }
  if (proto.opset_import_size() == 0) model.opsets[kOnnxDomain] = 1;  // IR < 3 models

  std::set<std::string> local_functions;
  for (const auto& f : proto.functions())
    local_functions.insert(canonical_domain(f.domain()) + ":" + f.name());
  check_ops_exist(proto.graph(), model.opsets, local_functions, source);

  if (checker_applies(proto, model.opsets)) {
    // The ONNX checker, node by node: attribute types and counts against each op's schema.
    // Its graph-level checks are volt's own (compile_graph): they accept unsorted nodes, and
    // they never touch external-data paths before those are vetted.
    onnx::checker::CheckerContext cctx;
    cctx.set_ir_version(static_cast<int>(proto.ir_version()));
    std::unordered_map<std::string, int> imports;
    for (const auto& op : proto.opset_import())
      imports[op.domain()] = static_cast<int>(op.version());
    cctx.set_opset_imports(imports);
    cctx.set_is_main_graph(true);
    onnx::checker::LexicalScopeContext lex;
    for (const auto& n : proto.graph().node()) {
      bool has_subgraph = false;
      for (const auto& a : n.attribute()) has_subgraph |= a.has_g() || a.graphs_size() > 0;
      if (has_subgraph || local_functions.count(canonical_domain(n.domain()) + ":" + n.op_type()))
        continue;
      try {
        onnx::checker::check_node(n, cctx, lex);
      } catch (const std::exception& e) {
        std::string msg = e.what();
        msg = msg.substr(0, msg.find(" ==> Context"));
        fail(ErrorCode::InvalidModel,
             source + ": node '" + n.name() + "' (" + n.op_type() + "): ONNX checker: " + msg);
      }
    }
    // No libonnx shape inference: volt's own shape functions decide at plan time, and
    // libonnx 1.12's inference functions crash on hostile models (null dereferences in the
    // Scan-8 and Conv/Pool ones, found by fuzzing), which no try/catch can contain.
  }

  if (proto.functions_size() > 0) inline_local_functions(proto, source);
  ExternalData external(base_dir, source);
  LoadContext ctx{source, &external, model.opsets};
  ctx.cut = cut;
  model.graph = std::move(*graph_from_proto(proto.graph(), ctx));
  return model;
}

void collect_op_types(const onnx::GraphProto& g, std::set<std::string>& ops) {
  for (const auto& n : g.node()) {
    if (canonical_domain(n.domain()) == kOnnxDomain) ops.insert(n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_op_types(a.g(), ops);
      for (const auto& sg : a.graphs()) collect_op_types(sg, ops);
    }
  }
}

ParsedModel parsed_model(const onnx::ModelProto& proto) {
  ParsedModel p;
  collect_op_types(proto.graph(), p.op_types);
  std::set<std::string> initializers;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (const auto& t : proto.graph().initializer()) {
    initializers.insert(t.name());
    int64_t n = 1;
    for (const int64_t d : t.dims()) n = d <= 0 ? 0 : (n > kMax / d ? kMax : n * d);
    p.weight_elements = n > kMax - p.weight_elements ? kMax : p.weight_elements + n;
  }
  for (const auto& v : proto.graph().input()) {
    if (initializers.count(v.name()) || !v.type().has_tensor_type() ||
        !v.type().tensor_type().has_shape())
      continue;
    const auto& dims = v.type().tensor_type().shape().dim();
    for (int i = 1; i < dims.size(); ++i) p.input_dims_vary |= !dims[i].has_dim_value();
  }
  return p;
}

}  // namespace

namespace {

// `cut` takes the bytes of the main graph's large initializers, which the proto then lacks
// (initializer_bytes.hpp), where there are any.
onnx::ModelProto parse_model(const void* data, size_t size, const std::string& source,
                             CutSource& cut) {
  VOLT_CHECK(size > 0, InvalidModel, source + ": empty file, not an ONNX model");
  VOLT_CHECK(size < (size_t{1} << 31), InvalidModel,
             source + ": " + std::to_string(size) +
                 " bytes is over protobuf's 2 GiB limit; store weights as external data");
  const std::string malformed =
      source + ": not a valid ONNX model (the protobuf message is malformed or truncated)";
  onnx::ModelProto proto;
  CutInitializers cut_message;
  const char* bytes = static_cast<const char*>(data);
  if (size >= kMinCutBytes && cut_initializer_bytes(bytes, size, cut_message)) {
    VOLT_CHECK(proto.ParseFromString(cut_message.message), InvalidModel, malformed);
    cut = {bytes, std::move(cut_message.cuts), false};
    return proto;
  }
  VOLT_CHECK(proto.ParseFromArray(data, static_cast<int>(size)), InvalidModel, malformed);
  return proto;
}

}  // namespace

Model load_model_from_bytes(const void* data, size_t size, const std::string& source,
                            const std::string& base_dir, const OnParsed& on_parsed) {
  CutSource cut;
  onnx::ModelProto proto = parse_model(data, size, source, cut);
  if (on_parsed) on_parsed(parsed_model(proto));
  return convert(proto, source, base_dir, cut.base ? &cut : nullptr);
}

std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  VOLT_CHECK(fs::is_regular_file(path, ec), Io, path + ": no such model file");
  std::ifstream in(path, std::ios::binary);
  VOLT_CHECK(in, Io, path + ": cannot open");
  const auto size = fs::file_size(path, ec);
  VOLT_CHECK(!ec, Io, path + ": cannot read its size");
  std::string bytes(static_cast<size_t>(size), '\0');  // one read, no regrowth
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  VOLT_CHECK(!in.bad() && static_cast<size_t>(in.gcount()) == size, Io, path + ": read failed");
  return bytes;
}

Model load_model(const std::string& path, const OnParsed& on_parsed) {
  std::string dir = fs::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  onnx::ModelProto proto;
  const ModelFileBytes bytes = parse_model_file(path, proto);
  if (on_parsed) on_parsed(parsed_model(proto));
  return convert(proto, path, dir, bytes.mapping ? &bytes.cut : nullptr);
}

}  // namespace volt
