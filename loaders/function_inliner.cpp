#include "loaders/function_inliner.hpp"

#include <map>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/graph.hpp"

namespace volt {
namespace {

class Inliner {
 public:
  Inliner(const onnx::ModelProto& model, std::string source) : source_(std::move(source)) {
    for (const auto& f : model.functions()) functions_[key(f.domain(), f.name())] = &f;
  }

  void inline_graph(onnx::GraphProto& g) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> out;
    for (auto& node : *g.mutable_node()) expand(node, out);
    *g.mutable_node() = std::move(out);
  }

 private:
  static std::string key(const std::string& domain, const std::string& name) {
    return canonical_domain(domain) + ":" + name;
  }

  void inline_subgraphs(onnx::NodeProto& node) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_g()) inline_graph(*a.mutable_g());
      for (auto& g : *a.mutable_graphs()) inline_graph(g);
    }
  }

  // Appends `node` to `out`, or the body of the function it calls, recursively.
  void expand(onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    auto it = functions_.find(key(node.domain(), node.op_type()));
    if (it == functions_.end()) {
      inline_subgraphs(node);
      *out.Add() = node;
      return;
    }
    const onnx::FunctionProto& f = *it->second;
    for (const std::string& active : stack_)
      VOLT_CHECK(active != it->first, InvalidModel,
                 source_ + ": model-local function '" + f.name() +
                     "' calls itself (recursion is not allowed in ONNX)");
    VOLT_CHECK(stack_.size() < 64, InvalidModel,
               source_ + ": model-local functions nest deeper than 64 calls");
    stack_.push_back(it->first);

    const std::string prefix = (node.name().empty() ? node.op_type() : node.name()) + "/" +
                               std::to_string(counter_++) + "/";
    std::map<std::string, std::string> rename;
    for (int i = 0; i < f.input_size(); ++i)
      rename[f.input(i)] = i < node.input_size() ? node.input(i) : std::string();
    for (int i = 0; i < f.output_size(); ++i)
      rename[f.output(i)] = i < node.output_size() ? node.output(i) : prefix + f.output(i);
    std::map<std::string, const onnx::AttributeProto*> actual;
    for (const auto& a : node.attribute()) actual[a.name()] = &a;

    for (const auto& body_node : f.node()) {
      onnx::NodeProto n = body_node;
      n.set_name(prefix + body_node.name());
      for (auto& in : *n.mutable_input()) in = mapped(in, rename, prefix);
      for (auto& o : *n.mutable_output()) o = mapped(o, rename, prefix);
      google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
      for (const auto& a : n.attribute()) {
        if (a.ref_attr_name().empty()) {
          *attrs.Add() = a;
          continue;
        }
        auto found = actual.find(a.ref_attr_name());
        if (found == actual.end()) continue;  // not given by the caller: the op's default applies
        onnx::AttributeProto resolved = *found->second;
        resolved.set_name(a.name());
        *attrs.Add() = resolved;
      }
      *n.mutable_attribute() = std::move(attrs);
      expand(n, out);
    }
    stack_.pop_back();
  }

  static std::string mapped(const std::string& name, std::map<std::string, std::string>& rename,
                            const std::string& prefix) {
    if (name.empty()) return name;
    auto it = rename.find(name);
    if (it != rename.end()) return it->second;
    return rename[name] = prefix + name;
  }

  std::string source_;
  std::map<std::string, const onnx::FunctionProto*> functions_;
  std::vector<std::string> stack_;
  int counter_ = 0;
};

}  // namespace

void inline_local_functions(onnx::ModelProto& model, const std::string& source) {
  Inliner inliner(model, source);
  inliner.inline_graph(*model.mutable_graph());
}

}  // namespace volt
