// Gradient rules of the network layers: Conv, ConvTranspose, pooling (max, average, Lp, and
// MaxUnpool), BatchNormalization,
// LayerNormalization, Slice and Resize, through volt's backward kernels.
#include "operators/grad/gradient_rule.hpp"
#include "runtime/error.hpp"

namespace volt {
namespace {

std::map<std::string, Attribute> copy_attrs(const Node& n,
                                            std::initializer_list<const char*> keys) {
  std::map<std::string, Attribute> out;
  for (const char* k : keys) {
    auto it = n.attributes.find(k);
    if (it != n.attributes.end()) out[k] = it->second;
  }
  return out;
}

const std::initializer_list<const char*> kWindow = {"kernel_shape", "strides",          "dilations",
                                                    "pads",         "auto_pad",         "group",
                                                    "ceil_mode",    "count_include_pad"};

void conv(GradEmitter& e) {
  const std::string g = e.grad_of_output(0);
  for (int64_t wrt : {0, 1}) {
    if (!e.needs_grad(static_cast<size_t>(wrt))) continue;
    auto attrs = copy_attrs(e.node(), kWindow);
    attrs["wrt"] = int_attr(wrt);
    e.set_grad(static_cast<size_t>(wrt),
               e.emit1("ConvGrad", {g, e.input(0), e.input(1)}, attrs, kVoltDomain));
  }
  if (e.node().has_input(2) && e.needs_grad(2))
    e.set_grad(2, e.emit1("BiasGrad", {g}, {}, kVoltDomain));
}

// Y = ConvTranspose(X, W) is the data-gradient of a convolution: dX = Conv(dY, W) and dW
// pairs X with dY the way a convolution's weight gradient pairs dY with its input.
void conv_transpose(GradEmitter& e) {
  const Node& n = e.node();
  VOLT_CHECK(
      !n.has_attr("output_shape") && n.attr_string("auto_pad", "NOTSET") == "NOTSET",
      NotImplemented,
      n.describe() +
          ": the gradient of ConvTranspose with output_shape or auto_pad is not supported yet");
  const std::string g = e.grad_of_output(0);
  auto attrs = copy_attrs(n, {"kernel_shape", "strides", "dilations", "pads", "group"});
  if (e.needs_grad(0)) e.set_grad(0, e.emit1("Conv", {g, e.input(1)}, attrs));
  if (e.needs_grad(1)) {
    attrs["wrt"] = int_attr(1);
    e.set_grad(1, e.emit1("ConvGrad", {e.input(0), g, e.input(1)}, attrs, kVoltDomain));
  }
  if (n.has_input(2) && e.needs_grad(2)) e.set_grad(2, e.emit1("BiasGrad", {g}, {}, kVoltDomain));
}

GradientRule pool(const char* kind, bool global) {
  return [kind, global](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    VOLT_CHECK(
        !e.node().has_output(1), NotImplemented,
        e.node().describe() + ": the gradient of MaxPool with an Indices output is not supported");
    auto attrs = copy_attrs(e.node(), kWindow);
    attrs["kind"] = string_attr(kind);
    attrs["global"] = int_attr(global);
    e.set_grad(
        0, e.emit1("PoolGrad", {e.grad_of_output(0), e.input(0), e.output(0)}, attrs, kVoltDomain));
  };
}

// Lp pooling: y = (sum over the window of |x|^p)^(1/p), so dy/dx = sign(x) |x|^(p-1) y^(1-p).
// The sum's adjoint is the average's (with the padding counted) times the window's size.
void lp_pool(GradEmitter& e, bool global) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  const std::string x = e.input(0), y = e.output(0);
  const float p = static_cast<float>(n.attr_int("p", 2));
  auto power = [&](const std::string& v, float k) {
    return e.emit1("Pow", {v, e.emit1("CastLike", {e.constant(Tensor::scalar(k)), v})});
  };
  const std::string local =
      e.emit1("Mul", {e.emit1("Sign", {x}), power(e.emit1("Abs", {x}), p - 1)});
  const std::string g = e.emit1("Mul", {e.grad_of_output(0), power(y, 1 - p)});
  if (global) {  // one window: g broadcasts over it
    e.set_grad(0, e.emit1("Mul", {local, g}));
    return;
  }
  auto attrs = copy_attrs(n, kWindow);
  attrs["kind"] = string_attr("average");
  attrs["global"] = int_attr(0);
  attrs["count_include_pad"] = int_attr(1);
  float window = 1;
  for (int64_t k : n.attr_ints("kernel_shape")) window *= static_cast<float>(k);
  const std::string spread = e.emit1("PoolGrad", {e.scale(g, window), x, y}, attrs, kVoltDomain);
  e.set_grad(0, e.emit1("Mul", {local, spread}));
}

// MaxUnpool puts x[i] at y.flat[indices[i]]: the gradient reads it back from there.
void max_unpool(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const std::string flat =
      e.emit1("Reshape", {e.grad_of_output(0), e.constant(Tensor::from<int64_t>({-1}, {1}))});
  e.set_grad(0, e.emit1("Gather", {flat, e.input(1)}));
}

// GridSample is linear in X: its gradient adds dY back at the taps it read.
void grid_sample(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  e.set_grad(0,
             e.emit1("GridSampleGrad", {e.grad_of_output(0), e.input(0), e.input(1)},
                     copy_attrs(e.node(), {"mode", "padding_mode", "align_corners"}), kVoltDomain));
}

void batch_norm(GradEmitter& e) {
  const Node& n = e.node();
  auto attrs = copy_attrs(n, {"epsilon"});
  attrs["training"] = int_attr(n.attr_int("training_mode", 0));
  const auto outs =
      e.emit("BatchNormGrad", {e.grad_of_output(0), e.input(0), e.input(1), e.input(3), e.input(4)},
             attrs, 3, kVoltDomain);
  for (size_t i = 0; i < 3; ++i)
    if (e.needs_grad(i)) e.set_grad(i, outs[i]);
}

void layer_norm(GradEmitter& e) {
  const Node& n = e.node();
  const auto outs = e.emit("LayerNormGrad", {e.grad_of_output(0), e.input(0), e.input(1)},
                           copy_attrs(n, {"axis", "epsilon"}), 3, kVoltDomain);
  if (e.needs_grad(0)) e.set_grad(0, outs[0]);
  if (e.needs_grad(1)) e.set_grad(1, e.emit1("Reshape", {outs[1], e.shape_of(e.input(1))}));
  if (n.has_input(2) && e.needs_grad(2))
    e.set_grad(2, e.emit1("Reshape", {outs[2], e.shape_of(e.input(2))}));
}

void slice(GradEmitter& e) {
  if (!e.needs_grad(0)) return;
  const Node& n = e.node();
  std::vector<std::string> ins{e.grad_of_output(0), e.shape_of(e.input(0))};
  if (n.opset < 10) {
    e.set_grad(0,
               e.emit1("SliceGrad", ins, copy_attrs(n, {"starts", "ends", "axes"}), kVoltDomain));
    return;
  }
  for (size_t i = 1; i < n.inputs.size(); ++i) ins.push_back(e.input(i));
  e.set_grad(0, e.emit1("SliceGrad", ins, {}, kVoltDomain));
}

GradientRule resize(bool upsample) {
  return [upsample](GradEmitter& e) {
    if (!e.needs_grad(0)) return;
    const Node& n = e.node();
    auto attrs = copy_attrs(n, {"mode", "coordinate_transformation_mode", "nearest_mode",
                                "cubic_coeff_a", "exclude_outside", "extrapolation_value", "axes",
                                "keep_aspect_ratio_policy", "scales"});
    attrs["forward_opset"] = int_attr(n.opset);
    attrs["upsample"] = int_attr(upsample);
    std::vector<std::string> ins{e.grad_of_output(0)};
    for (size_t i = 0; i < n.inputs.size(); ++i) ins.push_back(e.input(i));
    e.set_grad(0, e.emit1("ResizeGrad", ins, attrs, kVoltDomain));
  };
}

}  // namespace

VOLT_REGISTER_GRADIENT(conv, "Conv", conv);
VOLT_REGISTER_GRADIENT(conv_transpose, "ConvTranspose", conv_transpose);
VOLT_REGISTER_GRADIENT(max_pool, "MaxPool", pool("max", false));
VOLT_REGISTER_GRADIENT(average_pool, "AveragePool", pool("average", false));
VOLT_REGISTER_GRADIENT(global_average_pool, "GlobalAveragePool", pool("average", true));
VOLT_REGISTER_GRADIENT(global_max_pool, "GlobalMaxPool", pool("max", true));
VOLT_REGISTER_GRADIENT(lp_pool, "LpPool", [](GradEmitter& e) { lp_pool(e, false); });
VOLT_REGISTER_GRADIENT(global_lp_pool, "GlobalLpPool", [](GradEmitter& e) { lp_pool(e, true); });
VOLT_REGISTER_GRADIENT_OF(max_unpool, "MaxUnpool", ({0}), max_unpool);
// The schema differentiates X only (the grid's gradient is not built).
VOLT_REGISTER_GRADIENT_OF(grid_sample, "GridSample", ({0}), grid_sample);
VOLT_REGISTER_GRADIENT_OF(batch_norm, "BatchNormalization", ({0, 1, 2}), batch_norm);
VOLT_REGISTER_GRADIENT(layer_norm, "LayerNormalization", layer_norm);
VOLT_REGISTER_GRADIENT_OF(slice, "Slice", ({0}), slice);
VOLT_REGISTER_GRADIENT_OF(resize, "Resize", ({0}), resize(false));
VOLT_REGISTER_GRADIENT_OF(upsample, "Upsample", ({0}), resize(true));

}  // namespace volt
