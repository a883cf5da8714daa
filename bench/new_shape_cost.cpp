// What a model's first run at an input shape it has not seen costs over its second run there,
// split into planning (the run's start to its first node: RunProfile), the nodes' own time, and
// page faults, over a range of sizes of one axis. volt only: bench/corpus/dynamic_shapes.py
// compares the same thing with ONNX Runtime. For profiling the planner (`perf record` on it).
//
//   volt_new_shape_cost MODEL INPUT AXIS SHAPE LO HI STEP [int64] [--passes N] [--runs R]
//   [--by-node] [--per-size] [--descending]
//                       [--also NAME SHAPE [int64]]...
//   e.g. volt_new_shape_cost build/corpus/text_classifier.onnx ids 1 1x64 20 240 2 int64
//        volt_new_shape_cost build/corpus/gpt2_step.onnx past 4 4x2x1x4x32x64 1 256 32
//            --also ids 1x1 int64
//
// SHAPE is the input's shape at the warm-up (1x64); each size in [LO, HI) by STEP replaces
// dimension AXIS. With --runs R, each size runs R times (the first two measured; a shape's eighth
// run specializes its plan, as in bench/corpus/dynamic_shapes.py's 11 runs a size). With
// --passes N, the sizes run N-1 times before the measured pass (primitives
// kept across plans are then made; plans are rebuilt if the cache evicted them). --also feeds
// another input at a fixed shape; --by-node lists the slower nodes by name; --per-size lists each
// size's first and second run; --descending runs the sizes from the largest down. To profile the
// first runs alone:
//   mkfifo /tmp/ctl /tmp/ack; PERF_CTL_FIFO=/tmp/ctl PERF_ACK_FIFO=/tmp/ack
//       perf record --control fifo:/tmp/ctl,/tmp/ack -D -1 ...
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "volt/volt.hpp"

namespace {

volt::Value make_input(const volt::Shape& shape, bool int64) {
  const int64_t n = volt::numel_of(shape);
  if (int64) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7919) % 1000;
    return volt::Tensor::from(v, shape);
  }
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 1000) / 1000.0f;
  return volt::Tensor::from(v, shape);
}

// Dimensions joined by 'x': 1x64.
volt::Shape parse_shape(const char* text) {
  volt::Shape shape;
  for (const char* p = text; *p;) {
    char* end = nullptr;
    const long long d = std::strtoll(p, &end, 10);
    if (end == p || d < 0 || (*end != 'x' && *end != '\0'))
      throw volt::Error(
          volt::ErrorCode::InvalidArgument,
          std::string("a shape must be dimensions joined by 'x' (1x64), got '") + text + "'");
    shape.push_back(d);
    p = *end == 'x' ? end + 1 : end;
  }
  return shape;
}

// With PERF_CTL_FIFO and PERF_ACK_FIFO naming the pipes of `perf record --control
// fifo:CTL,ACK -D -1`, perf records the first runs only: `what` is "enable" or "disable".
void perf_control(const char* what) {
  static FILE* ctl =
      std::getenv("PERF_CTL_FIFO") ? std::fopen(std::getenv("PERF_CTL_FIFO"), "w") : nullptr;
  static FILE* ack =
      std::getenv("PERF_ACK_FIFO") ? std::fopen(std::getenv("PERF_ACK_FIFO"), "r") : nullptr;
  if (!ctl) return;
  std::fprintf(ctl, "%s\n", what);
  std::fflush(ctl);
  char line[16];
  if (ack && !std::fgets(line, sizeof line, ack)) ack = nullptr;  // (perf answers "ack")
}

long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s MODEL INPUT AXIS SHAPE LO HI STEP [int64] [--passes N]\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string model = argv[1], input = argv[2];
    const size_t axis = std::strtoul(argv[3], nullptr, 10);
    const volt::Shape shape = parse_shape(argv[4]);
    const int lo = std::atoi(argv[5]), hi = std::atoi(argv[6]),
              step = std::max(1, std::atoi(argv[7]));
    bool int64 = false, by_node = false, per_size = false, descending = false;
    int passes = 1, runs = 2;
    struct Fixed {
      std::string name;
      volt::Shape shape;
      bool int64 = false;
    };
    std::vector<Fixed> also;
    for (int i = 8; i < argc; ++i) {
      if (std::strcmp(argv[i], "int64") == 0) int64 = true;
      if (std::strcmp(argv[i], "--by-node") == 0) by_node = true;
      if (std::strcmp(argv[i], "--per-size") == 0) per_size = true;
      if (std::strcmp(argv[i], "--descending") == 0) descending = true;
      if (std::strcmp(argv[i], "--passes") == 0 && i + 1 < argc) passes = std::atoi(argv[++i]);
      if (std::strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
        runs = std::max(2, std::atoi(argv[++i]));
      if (std::strcmp(argv[i], "--also") == 0 && i + 2 < argc) {
        also.push_back({argv[i + 1], parse_shape(argv[i + 2])});
        i += 2;
        if (i + 1 < argc && std::strcmp(argv[i + 1], "int64") == 0) also.back().int64 = ++i > 0;
      }
    }
    if (axis >= shape.size())
      throw volt::Error(volt::ErrorCode::InvalidArgument, "AXIS is past SHAPE");

    volt::SessionOptions options;
    options.threads = 2;
    const volt::Session session(model, options);
    auto feeds = [&](int64_t size) {
      volt::Shape s = shape;
      s[axis] = size;
      volt::NamedValues f;
      f.emplace_back(input, make_input(s, int64));
      for (const Fixed& a : also) f.emplace_back(a.name, make_input(a.shape, a.int64));
      return f;
    };
    for (int i = 0; i < 3; ++i) session.run(feeds(shape[axis]));

    struct Totals {
      double wall = 0, nodes = 0, planning = 0, faults = 0;
      std::vector<double> walls, plannings, node_times, fault_counts;  // by size
      std::vector<int> sizes;
      std::map<std::string, double> by_op;
    } first, second;
    int sizes = 0;
    const int last = lo + (hi - 1 - lo) / step * step;  // the largest size, for --descending
    for (int pass = 1; pass <= passes; ++pass)
      for (int k = 0; lo + k * step < hi; ++k) {
        const int size = descending ? last - k * step : lo + k * step;
        const volt::NamedValues f = feeds(size);
        if (pass < passes) {
          session.run(f);
          continue;
        }
        for (Totals* t : {&first, &second}) {
          if (t == &first) perf_control("enable");
          if (t == &second) perf_control("disable");
          volt::RunProfile profile;
          volt::RunOptions run_options;
          run_options.profile = &profile;
          const long faults = minor_faults();
          const auto start = std::chrono::steady_clock::now();
          session.run(f, {}, run_options);
          t->sizes.push_back(size);
          t->walls.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                  .count());
          t->wall += t->walls.back();
          t->fault_counts.push_back(static_cast<double>(minor_faults() - faults));
          t->faults += t->fault_counts.back();
          t->plannings.push_back(profile.events.empty() ? 0.0 : profile.events.front().start_us);
          t->planning += t->plannings.back();
          t->node_times.push_back(0);
          for (const volt::ProfileEvent& e : profile.events) {
            t->node_times.back() += e.duration_us;
            t->nodes += e.duration_us;
            t->by_op[by_node ? e.node : e.op + " (" + e.kernel + ")"] += e.duration_us;
          }
        }
        for (int r = 2; r < runs; ++r) session.run(f);
        ++sizes;
      }
    if (sizes == 0) throw volt::Error(volt::ErrorCode::InvalidArgument, "no size in [LO, HI)");
    if (per_size) {
      std::printf("size   first: wall planning nodes faults   second: wall nodes   first/second\n");
      for (size_t i = 0; i < first.walls.size(); ++i)
        std::printf("%5d  %12.0f %8.0f %5.0f %6.0f  %13.0f %5.0f   %.2fx\n", first.sizes[i],
                    first.walls[i], first.plannings[i], first.node_times[i], first.fault_counts[i],
                    second.walls[i], second.node_times[i], first.walls[i] / second.walls[i]);
    }
    const double n = sizes;
    std::printf("%d new sizes, per run (us):      first    second\n", sizes);
    std::printf("  wall                        %8.0f  %8.0f   (%.2fx)\n", first.wall / n,
                second.wall / n, first.wall / second.wall);
    std::printf("  before the first node       %8.0f  %8.0f   (planning)\n", first.planning / n,
                second.planning / n);
    // What bench/corpus/dynamic_shapes.py's floor reads: the median over sizes of first/second,
    // which the first size's one-off costs (weights kept for every plan) do not move.
    std::vector<double> ratios;
    for (size_t i = 0; i < first.walls.size(); ++i)
      ratios.push_back(first.walls[i] / second.walls[i]);
    std::sort(ratios.begin(), ratios.end());
    std::vector<double> plannings = first.plannings;
    std::sort(plannings.begin(), plannings.end());
    std::printf("  median over sizes           %8.0f planning, first/second %.2fx\n",
                plannings[plannings.size() / 2], ratios[ratios.size() / 2]);
    std::printf("  nodes                       %8.0f  %8.0f\n", first.nodes / n, second.nodes / n);
    std::printf("  minor page faults           %8.1f  %8.1f\n", first.faults / n,
                second.faults / n);
    std::vector<std::pair<double, std::string>> slower;
    for (const auto& [op, us] : first.by_op) slower.emplace_back((us - second.by_op[op]) / n, op);
    std::sort(slower.rbegin(), slower.rend());
    std::printf("%s slower in the first run:\n", by_node ? "nodes" : "ops");
    for (size_t i = 0; i < slower.size() && i < (by_node ? 40u : 8u); ++i)
      std::printf("  %-40s +%7.1f us  (second run %7.1f us)\n", slower[i].second.c_str(),
                  slower[i].first, second.by_op[slower[i].second] / n);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "volt_new_shape_cost: %s\n", e.what());
    return 1;
  }
}
