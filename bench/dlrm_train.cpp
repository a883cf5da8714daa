// Times fine-tuning steps of a DLRM-style model (bench/dlrm_compare.py writes it): random dense
// features, ids and click labels; forward, backward, optimizer. Prints one line:
//   "volt_dlrm step_ms median=M p10=A p90=B peak_rss_mib=R step_peak_mib=S"
// R is the process's peak (loading included); S the peak resident memory while the timed steps
// ran (Linux: reset through /proc/self/clear_refs after the warm-up), which is the weights, the
// optimizer state and whatever a step needs besides.
//   volt_dlrm_train MODEL --tables T --rows R --lookups L [--batch 256] [--optimizer adam]
//                   [--sparse-gradients auto|off] [--threads T] [--warmup W] [--iterations N]
//                   [--features ids|csr]
// --features csr feeds each table's lookups as a CSR multi-hot matrix "feat<t>" [batch, rows]
// (the model multiplies it by the table) instead of ids "ids<t>" [batch, lookups].

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "volt/volt.hpp"

// A field of /proc/self/status ("VmRSS", "VmHWM") in MiB, or -1 where there is none.
double status_mib(const std::string& field) {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == field + ":") {
      double kib = 0;
      f >> kib;
      return kib / 1024.0;
    }
    std::getline(f, key);
  }
  return -1;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: volt_dlrm_train MODEL [--key value]...\n");
    return 2;
  }
  int64_t tables = 8, rows = 100000, lookups = 4, batch = 256, dense_features = 13;
  std::string optimizer = "adam", sparse = "auto", threads = "0", features = "ids";
  int warmup = 3, iterations = 20;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tables")
      tables = std::stoll(v);
    else if (k == "--rows")
      rows = std::stoll(v);
    else if (k == "--lookups")
      lookups = std::stoll(v);
    else if (k == "--batch")
      batch = std::stoll(v);
    else if (k == "--optimizer")
      optimizer = v;
    else if (k == "--features")
      features = v;
    else if (k == "--sparse-gradients")
      sparse = v;
    else if (k == "--threads")
      threads = v;
    else if (k == "--warmup")
      warmup = std::stoi(v);
    else if (k == "--iterations")
      iterations = std::stoi(v);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  try {
    volt::Trainer trainer(argv[1], {{"loss", "cross_entropy"},
                                    {"optimizer", optimizer},
                                    {"learning_rate", "0.001"},
                                    {"sparse_gradients", sparse},
                                    {"threads", threads}});
    std::mt19937_64 rng(5);
    std::uniform_int_distribution<int64_t> id(0, rows - 1);
    std::normal_distribution<float> unit(0, 1);
    auto make_batch = [&] {
      volt::NamedValues b;
      volt::Tensor dense = volt::Tensor::empty(volt::DType::Float, {batch, dense_features});
      for (int64_t i = 0; i < dense.numel(); ++i) dense.data<float>()[i] = unit(rng);
      b.emplace_back("dense", dense);
      for (int64_t t = 0; t < tables; ++t) {
        std::vector<int64_t> ids(static_cast<size_t>(batch * lookups));
        for (int64_t& i : ids) i = id(rng);
        if (features == "csr") {  // row r holds a 1 in the column of each of its lookups
          std::vector<int64_t> offsets(static_cast<size_t>(batch + 1));
          for (int64_t r = 0; r <= batch; ++r) offsets[static_cast<size_t>(r)] = r * lookups;
          const std::vector<float> ones(ids.size(), 1.0f);
          b.emplace_back("feat" + std::to_string(t),
                         volt::CsrTensor::copy_of(volt::DType::Float, batch, rows,
                                                  static_cast<int64_t>(ids.size()), offsets.data(),
                                                  ids.data(), ones.data()));
        } else {
          b.emplace_back("ids" + std::to_string(t),
                         volt::Tensor::from<int64_t>(ids, {batch, lookups}));
        }
      }
      volt::Tensor label = volt::Tensor::empty(volt::DType::Int64, {batch});
      for (int64_t i = 0; i < batch; ++i)
        label.data<int64_t>()[i] = static_cast<int64_t>(rng() % 2);
      b.emplace_back("label", label);
      return b;
    };
    for (int i = 0; i < warmup; ++i) trainer.step(make_batch());
    // The peak so far (loading and the warm-up steps), from this process's own memory map:
    // getrusage's ru_maxrss would also count the parent's peak from before exec.
    const double load_peak_mib = status_mib("VmHWM");
    const bool peak_reset = static_cast<bool>(std::ofstream("/proc/self/clear_refs") << "5");
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
      const volt::NamedValues b = make_batch();
      const auto t0 = std::chrono::steady_clock::now();
      trainer.step(b);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double step_peak_mib = peak_reset ? status_mib("VmHWM") : -1;
    std::printf("volt_dlrm step_ms median=%.3f p10=%.3f p90=%.3f peak_rss_mib=%.0f",
                ms[ms.size() / 2], ms[ms.size() / 10], ms[ms.size() * 9 / 10],
                std::max(load_peak_mib, step_peak_mib));
    if (peak_reset)
      std::printf(" step_peak_mib=%.0f\n", step_peak_mib);
    else
      std::printf(" step_peak_mib=unknown\n");
  } catch (const volt::Error& e) {
    std::fprintf(stderr, "volt_dlrm_train: %s\n", e.what());
    return 2;
  }
  return 0;
}
