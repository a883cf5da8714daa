// What the training tests feed the bundled MNIST-shaped MLP: a separable 10-class problem in
// 784 dimensions, batches cut from it, and the accuracy of a trainer's predictions.
#pragma once
#include <algorithm>
#include <random>
#include <vector>

#include "volt/volt.hpp"

namespace volt::testing {

// A separable 10-class problem in 784 dimensions: class centers plus noise.
struct Dataset {
  Tensor x, y;
};
inline Dataset synthetic(int64_t n, uint64_t seed, float noise = 0.6f) {
  std::mt19937_64 centers_rng(7);  // the same centers for every split
  std::normal_distribution<float> unit(0, 1);
  std::vector<float> centers(10 * 784);
  for (float& c : centers) c = unit(centers_rng) * 0.5f;
  std::mt19937_64 rng(seed);
  Dataset d{Tensor::empty(DType::Float, {n, 784}), Tensor::empty(DType::Int64, {n})};
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = static_cast<int64_t>(rng() % 10);
    d.y.data<int64_t>()[i] = c;
    for (int64_t j = 0; j < 784; ++j)
      d.x.data<float>()[i * 784 + j] = centers[c * 784 + j] + noise * unit(rng);
  }
  return d;
}

inline Tensor rows(const Tensor& t, int64_t begin, int64_t count) {
  Shape s = t.shape();
  s[0] = count;
  const size_t row = t.nbytes() / static_cast<size_t>(t.dim(0));
  return Tensor::copy_of(t.dtype(), s,
                         static_cast<const char*>(t.raw()) + row * static_cast<size_t>(begin));
}

inline double accuracy(const Trainer& tr, const Dataset& d) {
  const Tensor logits = tr.predict({{"x", d.x}})[0].tensor();
  int64_t right = 0;
  for (int64_t i = 0; i < d.x.dim(0); ++i) {
    const float* r = logits.data<float>() + i * 10;
    right += std::max_element(r, r + 10) - r == d.y.data<int64_t>()[i];
  }
  return static_cast<double>(right) / static_cast<double>(d.x.dim(0));
}

}  // namespace volt::testing
