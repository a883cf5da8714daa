// Random generators: RandomUniform, RandomNormal, their *Like forms, Bernoulli, Multinomial.
// With a `seed` attribute each run draws the same numbers; without, each run draws new ones.
// Never evaluated at plan time (foldable = false). Values cannot match other runtimes'
// generators, only their distributions.
#include <atomic>
#include <bit>
#include <cmath>
#include <random>

#include "operators/common/dispatch.hpp"
#include "operators/common/shape_util.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

std::mt19937_64 generator(const Node& n) {
  static std::atomic<uint64_t> counter{0x9e3779b97f4a7c15ull};
  if (n.has_attr("seed")) {
    // Any float is a seed: whole numbers in range by value, the rest (NaN, huge) by bit pattern
    // (a float-to-integer conversion out of range is undefined).
    const float s = n.attr_float("seed", 0);
    const bool in_range = std::isfinite(s) && std::fabs(s) < 9.2e18f;
    return std::mt19937_64(in_range ? static_cast<uint64_t>(static_cast<int64_t>(s))
                                    : std::bit_cast<uint32_t>(s));
  }
  return std::mt19937_64(counter.fetch_add(0x9e3779b97f4a7c15ull) ^
                         static_cast<uint64_t>(std::random_device{}()));
}

template <class F>
void fill(Tensor& t, F draw) {
  dispatch_numeric(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = static_cast<T>(static_cast<typename Compute<T>::type>(draw(i)));
  });
}

class RandomOp final : public Kernel {
 public:
  RandomOp(const Node& n, bool normal, bool like)
      : node_(n),
        normal_(normal),
        like_(like),
        a_(n.attr_float(normal ? "mean" : "low", normal ? 0.0f : 0.0f)),
        b_(n.attr_float(normal ? "scale" : "high", 1.0f)),
        shape_(n.attr_ints("shape")),
        dtype_(n.attr_int("dtype", 0)) {}
  void infer(InferContext& ctx) const override {
    const DType dt = dtype_ ? static_cast<DType>(dtype_) : (like_ ? ctx.dtype(0) : DType::Float);
    ctx.set_output(0, dt, like_ ? ctx.shape(0) : Shape(shape_.begin(), shape_.end()));
  }
  void run(RunContext& ctx) const override {
    auto rng = generator(node_);
    std::normal_distribution<double> nd(a_, b_);
    std::uniform_real_distribution<double> ud(a_, b_);
    fill(ctx.output(0), [&](int64_t) { return normal_ ? nd(rng) : ud(rng); });
  }

 private:
  Node node_;
  bool normal_, like_;
  float a_, b_;
  std::vector<int64_t> shape_;
  int64_t dtype_;
};

class Bernoulli final : public Kernel {
 public:
  explicit Bernoulli(const Node& n) : node_(n), dtype_(n.attr_int("dtype", 0)) {}
  void infer(InferContext& ctx) const override {
    ctx.set_output(0, dtype_ ? static_cast<DType>(dtype_) : ctx.dtype(0), ctx.shape(0));
  }
  void run(RunContext& ctx) const override {
    auto rng = generator(node_);
    std::uniform_real_distribution<double> u(0, 1);
    const Tensor& p = ctx.input(0);
    std::vector<double> probs(static_cast<size_t>(p.numel()));
    dispatch_numeric(p.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < p.numel(); ++i)
        probs[i] = static_cast<double>(
            static_cast<typename Compute<T>::type>(static_cast<const T*>(p.raw())[i]));
    });
    fill(ctx.output(0), [&](int64_t i) { return u(rng) < probs[i] ? 1.0 : 0.0; });
  }

 private:
  Node node_;
  int64_t dtype_;
};

class Multinomial final : public Kernel {
 public:
  explicit Multinomial(const Node& n)
      : node_(n), samples_(n.attr_int("sample_size", 1)), dtype_(n.attr_int("dtype", 6)) {}
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(
        ctx.shape(0).size() == 2, InvalidArgument,
        ctx.node().describe() + ": input must be [batch, classes], got " + shape_str(ctx.shape(0)));
    ctx.set_output(0, static_cast<DType>(dtype_), {ctx.shape(0)[0], samples_});
  }
  void run(RunContext& ctx) const override {
    auto rng = generator(node_);
    const Tensor& x = ctx.input(0);  // [batch, classes] of unnormalized log-probabilities
    const int64_t batch = x.dim(0), classes = x.dim(1);
    std::vector<double> logits(static_cast<size_t>(x.numel()));
    dispatch_numeric(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < x.numel(); ++i)
        logits[i] = static_cast<double>(
            static_cast<typename Compute<T>::type>(static_cast<const T*>(x.raw())[i]));
    });
    std::vector<double> picks;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> w(logits.begin() + b * classes, logits.begin() + (b + 1) * classes);
      const double mx = *std::max_element(w.begin(), w.end());
      for (double& v : w) v = std::exp(v - mx);
      std::discrete_distribution<int64_t> d(w.begin(), w.end());
      for (int64_t s = 0; s < samples_; ++s) picks.push_back(static_cast<double>(d(rng)));
    }
    fill(ctx.output(0), [&](int64_t i) { return picks[i]; });
  }

 private:
  Node node_;
  int64_t samples_, dtype_;
};

KernelDef random(const char* op, bool normal, bool like) {
  return {.op = op, .foldable = false, .create = [=](const Node& n) {
            return std::make_unique<RandomOp>(n, normal, like);
          }};
}

}  // namespace

VOLT_REGISTER_KERNEL(random_uniform, random("RandomUniform", false, false));
VOLT_REGISTER_KERNEL(random_normal, random("RandomNormal", true, false));
VOLT_REGISTER_KERNEL(random_uniform_like, random("RandomUniformLike", false, true));
VOLT_REGISTER_KERNEL(random_normal_like, random("RandomNormalLike", true, true));
VOLT_REGISTER_KERNEL(bernoulli, {.op = "Bernoulli",
                                 .since = 15,
                                 .foldable = false,
                                 .create = make_kernel<Bernoulli>});
VOLT_REGISTER_KERNEL(multinomial, {.op = "Multinomial",
                                   .since = 7,
                                   .foldable = false,
                                   .create = make_kernel<Multinomial>});

}  // namespace volt
