// volt train MODEL --input NAME=FILE.npy... --label FILE.npy [--loss L] [--optimizer O]
//   [--learning-rate LR] [--batch N] [--epochs E] [--validation-split F] [--checkpoint FILE]
//   [--export OUT.onnx] [--threads T] [--seed S] [--accumulate N] [--option KEY=VALUE]...
// Shuffles, batches, shows a progress bar with loss and samples/s, and prints validation loss
// and accuracy after each epoch. Under mpirun every rank runs this: all shuffle alike, each
// takes its share of every global batch, and rank 0 prints, validates and writes the files.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>

#include "loaders/npy.hpp"
#include "tools/cli_util.hpp"
#include "tools/commands.hpp"

namespace volt::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The rows of `t` at `idx`, as a new tensor.
Tensor take_rows(const Tensor& t, const std::vector<int64_t>& idx, size_t begin, size_t end) {
  Shape s = t.shape();
  s[0] = static_cast<int64_t>(end - begin);
  Tensor out = Tensor::empty_on(Device{}, t.dtype(), s);  // (uninitialized: every row is written)
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  for (size_t i = begin; i < end; ++i)
    std::memcpy(static_cast<char*>(out.raw()) + (i - begin) * row,
                static_cast<const char*>(t.raw()) + static_cast<size_t>(idx[i]) * row, row);
  return out;
}

Tensor as_int64(const Tensor& t) {
  if (t.dtype() == DType::Int64) return t;
  Tensor out = Tensor::empty(DType::Int64, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::Int32)
      out.data<int64_t>()[i] = t.data<int32_t>()[i];
    else if (t.dtype() == DType::UInt8)
      out.data<int64_t>()[i] = t.data<uint8_t>()[i];
    else
      throw Error(ErrorCode::InvalidArgument,
                  std::string("--label: class ids must be integers, got ") + dtype_name(t.dtype()));
  }
  return out;
}

}  // namespace

int cmd_train(const Args& args) {
  if (!args.has("label"))
    throw Error(ErrorCode::InvalidArgument, "--label FILE.npy is required (volt train --help)");
  const std::string loss = args.get("loss", "cross_entropy");
  TrainOptions opts{{"loss", loss},
                    {"optimizer", args.get("optimizer", "adam")},
                    {"learning_rate", args.get("learning-rate", "0.001")}};
  if (args.has("threads")) opts.emplace_back("threads", args.get("threads"));
  if (args.has("seed")) opts.emplace_back("seed", args.get("seed"));
  if (args.has("device")) opts.emplace_back("device", args.get("device"));
  if (args.has("precision")) opts.emplace_back("precision", args.get("precision"));
  if (args.has("accumulate")) opts.emplace_back("accumulate_steps", args.get("accumulate"));
  for (const auto& kv : args.all("option")) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::InvalidArgument, "--option '" + kv + "' is not KEY=VALUE");
    opts.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  const int batch = args.get_int("batch", 64), epochs = args.get_int("epochs", 1);
  const double val_split = args.get_double("validation-split", 0.0);
  if (batch < 1 || epochs < 1 || val_split < 0 || val_split >= 1)
    throw Error(ErrorCode::InvalidArgument,
                "--batch and --epochs must be >= 1, --validation-split in [0, 1)");

  Trainer trainer(args.positional[0], opts);
  const int rank = trainer.rank(), world = trainer.world_size();
  const bool lead = rank == 0;  // prints, validates, writes
  if (batch % world != 0)
    throw Error(ErrorCode::InvalidArgument,
                "--batch " + std::to_string(batch) + " does not divide among " +
                    std::to_string(world) + " ranks; give a multiple of " + std::to_string(world));
  std::vector<std::pair<std::string, Tensor>> data;
  for (const auto& spec : args.all("input")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::InvalidArgument, "--input '" + spec + "' is not NAME=FILE.npy");
    data.emplace_back(spec.substr(0, eq), map_npy(spec.substr(eq + 1)));
  }
  if (data.empty())
    throw Error(ErrorCode::InvalidArgument, "give the model's inputs with --input NAME=FILE.npy");
  Tensor labels = map_npy(args.get("label"));
  if (loss == "cross_entropy") labels = as_int64(labels);
  const int64_t n = labels.rank() ? labels.dim(0) : 0;
  for (const auto& [name, t] : data)
    if (t.rank() == 0 || t.dim(0) != n)
      throw Error(ErrorCode::InvalidArgument, "input '" + name + "' has " +
                                                  std::to_string(t.rank() ? t.dim(0) : 0) +
                                                  " samples, the labels " + std::to_string(n));

  std::mt19937_64 rng(args.has("seed") ? static_cast<uint64_t>(args.get_int("seed", 0)) : 1234);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  const size_t n_val = static_cast<size_t>(std::floor(val_split * static_cast<double>(n)));
  const std::vector<int64_t> val(order.begin(), order.begin() + static_cast<long>(n_val));
  std::vector<int64_t> train(order.begin() + static_cast<long>(n_val), order.end());
  if (train.size() < static_cast<size_t>(world))
    throw Error(ErrorCode::InvalidArgument,
                "fewer training samples (" + std::to_string(train.size()) +
                    ") after the validation split than ranks (" + std::to_string(world) + ")");
  auto batch_of = [&](const std::vector<int64_t>& idx, size_t b, size_t e, bool with_label) {
    NamedValues v;
    for (const auto& [name, t] : data) v.emplace_back(name, take_rows(t, idx, b, e));
    if (with_label) v.emplace_back("label", take_rows(labels, idx, b, e));
    return v;
  };
  const bool tty = lead && isatty(fileno(stderr));
  if (lead) {
    std::printf("training %s: %zu samples, %zu for validation, batch %d, %d epochs",
                args.positional[0].c_str(), train.size(), val.size(), batch, epochs);
    if (world > 1) std::printf(", %d ranks x %d samples", world, batch / world);
    if (args.has("accumulate"))
      std::printf(", %d micro-batches per update", args.get_int("accumulate", 1));
    std::printf("\n");
  }
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    std::shuffle(train.begin(), train.end(), rng);
    const auto t0 = Clock::now();
    double sum = 0;
    size_t steps = 0, seen = 0;
    for (size_t b = 0; b < train.size(); b += static_cast<size_t>(batch)) {
      const size_t e = std::min(train.size(), b + static_cast<size_t>(batch));
      // This rank's share; a last batch that does not divide leaves its remainder out.
      const size_t share = (e - b) / static_cast<size_t>(world);
      if (share == 0) break;
      const size_t from = b + static_cast<size_t>(rank) * share;
      sum += trainer.step(batch_of(train, from, from + share, true));
      ++steps;
      seen += share * static_cast<size_t>(world);
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      if (tty) {
        const int filled =
            static_cast<int>(30.0 * static_cast<double>(seen) / static_cast<double>(train.size()));
        std::fprintf(stderr, "\repoch %d [%-30s] loss %.4f  %.0f samples/s", epoch,
                     std::string(static_cast<size_t>(filled), '#').c_str(),
                     sum / static_cast<double>(steps),
                     secs > 0 ? static_cast<double>(seen) / secs : 0.0);
      }
    }
    if (tty) std::fprintf(stderr, "\n");
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (args.has("checkpoint")) trainer.save_checkpoint(args.get("checkpoint"));  // rank 0's
    if (!lead) continue;
    std::printf("epoch %d: train loss %.4f, %.0f samples/s", epoch,
                sum / static_cast<double>(steps), static_cast<double>(seen) / std::max(secs, 1e-9));
    if (!val.empty()) {
      const NamedValues v = batch_of(val, 0, val.size(), true);
      std::printf(", validation loss %.4f", trainer.evaluate(v));
      if (loss == "cross_entropy") {
        NamedValues inputs(v.begin(), v.end() - 1);
        const Tensor pred = trainer.predict(inputs)[0].tensor();
        const Tensor& lab = v.back().second.tensor();
        const int64_t classes = pred.dim(pred.rank() - 1);
        int64_t right = 0;
        for (int64_t i = 0; i < lab.numel(); ++i) {
          int64_t best = 0;
          for (int64_t c = 1; c < classes; ++c)
            if (pred.data<float>()[i * classes + c] > pred.data<float>()[i * classes + best])
              best = c;
          right += best == lab.data<int64_t>()[i];
        }
        std::printf(", validation accuracy %.2f%%",
                    100.0 * static_cast<double>(right) / static_cast<double>(lab.numel()));
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  if (lead && world > 1)
    std::printf("distributed: %d ranks, %lld bytes exchanged per optimizer step by each rank\n",
                world, static_cast<long long>(trainer.exchanged_bytes()));
  if (lead && (trainer.skipped_steps() > 0 || trainer.loss_scale() != 1.0f))
    std::printf("loss scale %g, %lld steps skipped for overflow\n",
                static_cast<double>(trainer.loss_scale()),
                static_cast<long long>(trainer.skipped_steps()));
  if (args.has("export")) {
    trainer.export_model(args.get("export"));
    if (lead) std::printf("exported %s\n", args.get("export").c_str());
  }
  return 0;
}

}  // namespace volt::cli
