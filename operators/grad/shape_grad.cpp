// Gradient rules of ops that move data: views (Reshape family), Transpose, Concat, Split,
// Gather and its relatives, scatters, Expand, Tile, Pad, DepthToSpace, Cast, Identity, Dropout.
#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

void pass_through(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("Identity", {e.grad_of_output(0)}));
}

void reshape_back(GradEmitter& e) {
  if (e.needs_grad(0))
    e.set_grad(0, e.emit1("Reshape", {e.grad_of_output(0), e.shape_of(e.input(0))}));
}

void transpose(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const auto perm = e.node().attr_ints("perm");
  std::map<std::string, Attribute> attrs;
  if (!perm.empty()) {  // the inverse permutation; without perm the transpose reverses, its own
                        // inverse
    std::vector<int64_t> inv(perm.size());
    for (size_t i = 0; i < perm.size(); ++i)
      inv[static_cast<size_t>(perm[i] < 0 ? perm[i] + static_cast<int64_t>(perm.size())
                                          : perm[i])] = static_cast<int64_t>(i);
    attrs["perm"] = ints_attr(inv);
  }
  e.set_grad(0, e.emit1("Transpose", {e.grad_of_output(0)}, attrs));
}

void concat(GradEmitter& e) {
  const int64_t axis = e.node().attr_int("axis");
  const size_t n = e.node().inputs.size();
  std::vector<std::string> sizes;
  const std::string axis_index = e.constant(Tensor::from<int64_t>({axis}, {1}));
  for (size_t i = 0; i < n; ++i)
    sizes.push_back(e.emit1("Gather", {e.shape_of(e.input(i)), axis_index}));
  const std::string split = e.emit1("Concat", sizes, {{"axis", int_attr(0)}});
  const auto parts = e.emit("Split", {e.grad_of_output(0), split}, {{"axis", int_attr(axis)}}, n);
  for (size_t i = 0; i < n; ++i)
    if (e.needs_grad(i)) e.set_grad(i, parts[i]);
}

void split(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  std::vector<std::string> parts;
  for (size_t i = 0; i < e.node().outputs.size(); ++i) {
    const std::string g = e.grad_of_output(i);
    parts.push_back(g.empty() ? e.emit1("ZerosLike", {e.output(i)}, {}, kVoltDomain) : g);
  }
  e.set_grad(0, e.emit1("Concat", parts, {{"axis", int_attr(e.node().attr_int("axis", 0))}}));
}

void gather(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  e.set_grad(0, e.emit1("GatherGrad", {e.grad_of_output(0), e.input(1), e.shape_of(e.input(0))},
                        {{"axis", int_attr(e.node().attr_int("axis", 0))}}, kVoltDomain));
}

void expand(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.sum_to(e.grad_of_output(0), e.input(0)));
}

void cast(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("CastLike", {e.grad_of_output(0), e.input(0)}));
}

void dropout(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  // Training mode scales kept elements by 1/(1-ratio) and zeroes the rest: so does the gradient.
  if (e.node().has_input(2) && e.node().has_output(1)) {
    e.set_grad(
        0, e.emit1("DropoutGrad", {e.grad_of_output(0), e.output(1), e.input(1)}, {}, kVoltDomain));
    return;
  }
  pass_through(e);
}

void cast_like(GradEmitter& e) {
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("CastLike", {e.grad_of_output(0), e.input(0)}));
}

void tile(GradEmitter& e) {
  if (e.needs_grad(0))
    e.set_grad(0,
               e.emit1("TileGrad", {e.grad_of_output(0), e.shape_of(e.input(0))}, {}, kVoltDomain));
}

// SpaceToDepth is the inverse of DepthToSpace in DCR mode, so each is the other's gradient.
void depth_to_space(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  const std::map<std::string, Attribute> b{{"blocksize", int_attr(n.attr_int("blocksize"))}};
  const bool crd = n.attr_string("mode", "DCR") == "CRD";
  e.set_grad(0, crd ? e.emit1("DepthToSpaceGrad", {e.grad_of_output(0)}, b, kVoltDomain)
                    : e.emit1("SpaceToDepth", {e.grad_of_output(0)}, b));
}

void space_to_depth(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  e.set_grad(0, e.emit1("DepthToSpace", {e.grad_of_output(0)},
                        {{"blocksize", int_attr(e.node().attr_int("blocksize"))},
                         {"mode", string_attr("DCR")}}));
}

// Constant padding adds values that do not depend on x; its gradient undoes the padding, which
// is padding by the negated amounts (a negative pad crops, and cropping's gradient pads zeros).
// The other modes read some elements of x several times: PadGrad adds their gradients up.
void pad(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  const std::string mode = n.attr_string("mode", "constant");
  const bool legacy = n.opset < 11;
  const std::vector<int64_t> legacy_pads =
      legacy ? n.attr_ints(n.has_attr("pads") ? "pads" : "paddings") : std::vector<int64_t>{};
  if (mode != "constant") {
    std::map<std::string, Attribute> attrs{{"mode", string_attr(mode)},
                                           {"legacy", int_attr(legacy)}};
    if (legacy) attrs["pads"] = ints_attr(legacy_pads);
    std::vector<std::string> ins{e.grad_of_output(0), e.input(0)};
    for (size_t i = 1; i < n.inputs.size(); ++i) ins.push_back(e.input(i));
    e.set_grad(0, e.emit1("PadGrad", ins, attrs, kVoltDomain));
    return;
  }
  std::string pads;
  if (legacy) {
    std::vector<int64_t> p = legacy_pads;
    for (auto& v : p) v = -v;
    pads = e.constant(Tensor::from<int64_t>(p, {static_cast<int64_t>(p.size())}));
  } else {
    pads = e.emit1("Neg", {e.input(1)});
  }
  std::vector<std::string> ins{e.grad_of_output(0), pads};
  if (n.has_input(3)) ins.insert(ins.end(), {"", e.input(3)});
  e.set_grad(0, e.emit1("Pad", ins));
}

// GatherElements and TopK pick elements of x at indices along an axis: their gradients add dy
// back at those indices.
void scatter_add(GradEmitter& e, const std::string& indices, const std::string& g, int64_t axis,
                 bool nd) {
  const std::string zeros = e.emit1("ZerosLike", {e.input(0)}, {}, kVoltDomain);
  std::map<std::string, Attribute> attrs{{"reduction", string_attr("add")}};
  if (!nd) attrs["axis"] = int_attr(axis);
  e.set_grad(0, e.emit1(nd ? "ScatterND" : "ScatterElements", {zeros, indices, g}, attrs));
}

void gather_elements(GradEmitter& e) {
  if (e.needs_grad(0))
    scatter_add(e, e.input(1), e.grad_of_output(0), e.node().attr_int("axis", 0), false);
}

void gather_nd(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  VOLT_CHECK(
      e.node().attr_int("batch_dims", 0) == 0, NotImplemented,
      e.node().describe() + ": the gradient of GatherND with batch_dims is not supported yet");
  scatter_add(e, e.input(1), e.grad_of_output(0), 0, true);
}

void top_k(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  if (e.grad_of_output(0).empty())  // only the indices were used: they carry no gradient
    return e.set_grad(0, e.emit1("ZerosLike", {e.input(0)}, {}, kVoltDomain));
  scatter_add(e, e.output(1), e.grad_of_output(0), e.node().attr_int("axis", -1), false);
}

// Scatter without reduction: data's gradient is dy where nothing was written, the updates' is dy
// gathered where they went.
void scatter(GradEmitter& e, bool nd) {
  const Node& n = e.node();
  VOLT_CHECK(
      n.attr_string("reduction", "none") == "none", NotImplemented,
      n.describe() + ": the gradient of " + n.op_type + " with a reduction is not supported");
  const std::string g = e.grad_of_output(0);
  std::map<std::string, Attribute> axis;
  if (!nd) axis["axis"] = int_attr(n.attr_int("axis", 0));
  if (e.needs_grad(0)) {
    const std::string zeros = e.emit1("ZerosLike", {e.input(2)}, {}, kVoltDomain);
    e.set_grad(0, e.emit1(nd ? "ScatterND" : "ScatterElements", {g, e.input(1), zeros}, axis));
  }
  if (e.needs_grad(2))
    e.set_grad(2, e.emit1(nd ? "GatherND" : "GatherElements", {g, e.input(1)}, axis));
}

void trilu(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  std::vector<std::string> ins{e.grad_of_output(0)};
  if (e.node().has_input(1)) ins.push_back(e.input(1));
  e.set_grad(0, e.emit1("Trilu", ins, {{"upper", int_attr(e.node().attr_int("upper", 1))}}));
}

// Compress is a Gather of the positions where the condition holds (of x flattened, without an
// axis).
void compress(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  const std::string positions = e.emit1(
      "Squeeze", {e.emit1("NonZero", {e.input(1)}), e.constant(Tensor::from<int64_t>({0}, {1}))});
  const std::string g = e.grad_of_output(0);
  if (n.has_attr("axis")) {
    e.set_grad(0, e.emit1("GatherGrad", {g, positions, e.shape_of(e.input(0))},
                          {{"axis", int_attr(n.attr_int("axis"))}}, kVoltDomain));
    return;
  }
  const std::string flat =
      e.emit1("Reshape", {e.input(0), e.constant(Tensor::from<int64_t>({-1}, {1}))});
  const std::string d =
      e.emit1("GatherGrad", {g, positions, e.shape_of(flat)}, {{"axis", int_attr(0)}}, kVoltDomain);
  e.set_grad(0, e.emit1("Reshape", {d, e.shape_of(e.input(0))}));
}

// The gradient of a running sum is the running sum of dy the other way round.
void cum_sum(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  e.set_grad(0, e.emit1("CumSum", {e.grad_of_output(0), e.input(1)},
                        {{"exclusive", int_attr(n.attr_int("exclusive", 0))},
                         {"reverse", int_attr(1 - n.attr_int("reverse", 0))}}));
}

}  // namespace

VOLT_REGISTER_GRADIENT(identity, "Identity", pass_through);
VOLT_REGISTER_GRADIENT_OF(reshape, "Reshape", ({0}), reshape_back);
VOLT_REGISTER_GRADIENT(flatten, "Flatten", reshape_back);
VOLT_REGISTER_GRADIENT_OF(squeeze, "Squeeze", ({0}), reshape_back);
VOLT_REGISTER_GRADIENT_OF(unsqueeze, "Unsqueeze", ({0}), reshape_back);
VOLT_REGISTER_GRADIENT(transpose, "Transpose", transpose);
VOLT_REGISTER_GRADIENT(concat, "Concat", concat);
VOLT_REGISTER_GRADIENT_OF(split, "Split", ({0}), split);
VOLT_REGISTER_GRADIENT_OF(gather, "Gather", ({0}), gather);
VOLT_REGISTER_GRADIENT_OF(expand, "Expand", ({0}), expand);
VOLT_REGISTER_GRADIENT(cast, "Cast", cast);
VOLT_REGISTER_GRADIENT_OF(cast_like, "CastLike", ({0}), cast_like);
VOLT_REGISTER_GRADIENT_OF(tile, "Tile", ({0}), tile);
VOLT_REGISTER_GRADIENT(depth_to_space, "DepthToSpace", depth_to_space);
VOLT_REGISTER_GRADIENT(space_to_depth, "SpaceToDepth", space_to_depth);
VOLT_REGISTER_GRADIENT_OF(pad, "Pad", ({0}), pad);
VOLT_REGISTER_GRADIENT_OF(gather_elements, "GatherElements", ({0}), gather_elements);
VOLT_REGISTER_GRADIENT_OF(gather_nd, "GatherND", ({0}), gather_nd);
VOLT_REGISTER_GRADIENT_OF(top_k, "TopK", ({0}), top_k);
VOLT_REGISTER_GRADIENT_OF(scatter_elements, "ScatterElements", ({0, 2}),
                          [](GradEmitter& e) { scatter(e, false); });
VOLT_REGISTER_GRADIENT_OF(scatter_nd, "ScatterND", ({0, 2}),
                          [](GradEmitter& e) { scatter(e, true); });
VOLT_REGISTER_GRADIENT_OF(trilu, "Trilu", ({0}), trilu);
VOLT_REGISTER_GRADIENT_OF(compress, "Compress", ({0}), compress);
VOLT_REGISTER_GRADIENT_OF(cum_sum, "CumSum", ({0}), cum_sum);
VOLT_REGISTER_GRADIENT_OF(dropout, "Dropout", ({0}), dropout);

}  // namespace volt
