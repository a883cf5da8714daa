// Times volt training steps (forward, backward, optimizer) on random data, for
// bench/train_compare.py.
//   volt_train_step MODEL INPUT_SHAPE(e.g. 64x784) CLASSES [--optimizer sgd] [--momentum 0.9]
//                   [--learning-rate 0.01] [--threads T] [--warmup W] [--iterations N]
// Prints one line: "volt_step_ms median=M p10=A p90=B".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>

#include "volt/volt.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: volt_train_step MODEL INPUT_SHAPE CLASSES [--key value]...\n");
    return 2;
  }
  try {
    volt::Shape shape;
    std::stringstream ss(argv[2]);
    for (std::string d; std::getline(ss, d, 'x');) shape.push_back(std::stoll(d));
    const int64_t classes = std::stoll(argv[3]);
    std::string optimizer = "sgd", momentum = "0.9", lr = "0.01", threads = "0";
    int warmup = 3, iterations = 20;
    for (int i = 4; i + 1 < argc; i += 2) {
      const std::string k = argv[i], v = argv[i + 1];
      if (k == "--optimizer")
        optimizer = v;
      else if (k == "--momentum")
        momentum = v;
      else if (k == "--learning-rate")
        lr = v;
      else if (k == "--threads")
        threads = v;
      else if (k == "--warmup")
        warmup = std::stoi(v);
      else if (k == "--iterations")
        iterations = std::stoi(v);
      else
        throw volt::Error(volt::ErrorCode::InvalidArgument, "unknown flag " + k);
    }
    volt::TrainOptions opts{{"optimizer", optimizer}, {"learning_rate", lr}, {"threads", threads}};
    if (optimizer == "sgd") opts.emplace_back("momentum", momentum);
    volt::Trainer trainer(argv[1], opts);
    std::mt19937 rng(1);
    std::normal_distribution<float> n01(0, 1);
    volt::Tensor x = volt::Tensor::empty(volt::DType::Float, shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = n01(rng);
    volt::Tensor y = volt::Tensor::empty(volt::DType::Int64, {shape[0]});
    for (int64_t i = 0; i < shape[0]; ++i)
      y.data<int64_t>()[i] = static_cast<int64_t>(rng() % static_cast<unsigned>(classes));
    const std::string input = "x";
    for (int i = 0; i < warmup; ++i) trainer.step({{input, x}, {"label", y}});
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      trainer.step({{input, x}, {"label", y}});
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    std::printf("volt_step_ms median=%.4f p10=%.4f p90=%.4f\n", ms[ms.size() / 2],
                ms[ms.size() / 10], ms[ms.size() * 9 / 10]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "volt_train_step: %s\n", e.what());
    return 2;
  }
}
