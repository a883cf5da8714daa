// volt bench MODEL: random inputs, warm-up runs not counted, then latency percentiles,
// throughput and peak memory; load and first-run times reported apart.
#include <sys/resource.h>
#include <unistd.h>
#include <cmath>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>

#include "tools/cli_util.hpp"
#include "tools/commands.hpp"

namespace volt::cli {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double peak_rss_mib() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}
std::string json_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out;
}

// Profiled runs after the timed ones (so timing them costs the measurement nothing): a
// chrome-trace file (chrome://tracing, Perfetto) of per-node times, and the ops that took longest
// on stderr.
void write_profile(const Session& session, const NamedValues& feeds, RunOptions run_options,
                   const std::string& path) {
  constexpr int kRuns = 10;
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw Error(ErrorCode::Io, "--profile: cannot write " + path);
  std::fprintf(f, "{\"traceEvents\": [\n");
  std::map<std::string, std::pair<double, int>> by_op;
  // Nodes on a reference loop: time and count by op, and why (the first reason given).
  std::map<std::string, std::pair<double, int>> reference_by_op;
  std::map<std::string, std::string> reference_why;
  double offset_us = 0, total_us = 0, reference_us = 0;
  bool first = true;
  for (int run = 0; run < kRuns; ++run) {
    RunProfile profile;
    run_options.profile = &profile;
    session.run(feeds, {}, run_options);
    double end_us = 0;
    for (const ProfileEvent& e : profile.events) {
      std::fprintf(f,
                   "%s{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"ts\": %.3f, "
                   "\"dur\": %.3f, \"pid\": 1, \"tid\": 1, \"args\": {\"run\": %d, \"kernel\": "
                   "\"%s\"}}",
                   first ? "" : ",\n", json_escaped(e.node).c_str(), json_escaped(e.op).c_str(),
                   offset_us + e.start_us, e.duration_us, run, e.kernel.c_str());
      first = false;
      by_op[e.op].first += e.duration_us;
      by_op[e.op].second += 1;
      total_us += e.duration_us;
      if (!e.reference.empty()) {
        reference_by_op[e.op].first += e.duration_us;
        reference_by_op[e.op].second += 1;
        reference_why.emplace(e.op, e.reference);
        reference_us += e.duration_us;
      }
      end_us = std::max(end_us, e.start_us + e.duration_us);
    }
    offset_us += end_us + 10;
  }
  std::fprintf(f, "\n]}\n");
  std::fclose(f);
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [op, t] : by_op) ranked.emplace_back(t.first, op);
  std::sort(ranked.rbegin(), ranked.rend());
  std::fprintf(stderr, "profile of %d runs written to %s; time by op:\n", kRuns, path.c_str());
  for (const auto& [us, op] : ranked)
    std::fprintf(stderr, "  %-24s %9.3f ms/run  %5.1f%%  (%d nodes/run)\n", op.c_str(),
                 us / kRuns / 1000.0, total_us > 0 ? 100.0 * us / total_us : 0.0,
                 by_op[op].second / kRuns);
  int reference_nodes = 0;
  std::string reference_ops;
  for (const auto& [op, t] : reference_by_op) {
    reference_nodes += t.second / kRuns;
    reference_ops +=
        (reference_ops.empty() ? ": " : ", ") + op + " \u00d7" + std::to_string(t.second / kRuns);
  }
  if (reference_nodes == 0) {
    std::fprintf(stderr, "reference kernels: none\n");
    return;
  }
  std::fprintf(stderr, "reference kernels: %d node%s, %.0f%% of the run%s\n", reference_nodes,
               reference_nodes == 1 ? "" : "s",
               total_us > 0 ? 100.0 * reference_us / total_us : 0.0, reference_ops.c_str());
  for (const auto& [op, why] : reference_why)
    std::fprintf(stderr, "  %-24s %s\n", op.c_str(), why.c_str());
}

// ||a - b|| / ||a|| over every float output: how far a reduced precision (bf16, fp16, int8)
// takes the model's answer from fp32's, on the benchmark's own inputs.
double relative_l2(const std::vector<Value>& reference, const std::vector<Value>& got) {
  double diff = 0, norm = 0;
  for (size_t k = 0; k < reference.size() && k < got.size(); ++k) {
    if (!reference[k].is_tensor() || !got[k].is_tensor()) continue;
    const Tensor &a = reference[k].tensor(), &b = got[k].tensor();
    if (a.dtype() != DType::Float || b.dtype() != DType::Float || a.numel() != b.numel()) continue;
    for (int64_t i = 0; i < a.numel(); ++i) {
      const double d = double{a.data<float>()[i]} - b.data<float>()[i];
      diff += d * d;
      norm += double{a.data<float>()[i]} * a.data<float>()[i];
    }
  }
  return norm > 0 ? std::sqrt(diff / norm) : 0.0;
}

}  // namespace

int cmd_bench(const Args& args) {
  const int batch = args.get_int("batch", 1);
  const int warmup = args.get_int("warmup", 5);
  const int iterations = args.get_int("iterations", args.has("seconds") ? 0 : 50);
  const double seconds = args.get_double("seconds", 0);
  if (batch < 1 || warmup < 0 || iterations < 0 || seconds < 0)
    throw Error(ErrorCode::InvalidArgument,
                "batch, warmup, iterations and seconds must be positive");
  const SessionOptions opts = session_options_from(args);
  const RunOptions run_options = run_options_from(args);

  const auto t_load = Clock::now();
  Session session(args.positional[0], opts);
  const double load_ms = ms_since(t_load);

  const NamedValues feeds = feeds_from(args, session, batch, 7);
  const auto t_first = Clock::now();
  session.run(feeds, {}, run_options);
  const double first_ms = ms_since(t_first);
  for (int i = 0; i < warmup; ++i) session.run(feeds, {}, run_options);

  std::vector<double> lat;
  const bool tty = isatty(fileno(stderr));
  const auto t_start = Clock::now();
  for (int i = 0;; ++i) {
    if (iterations > 0 && i >= iterations) break;
    if (iterations == 0 && ms_since(t_start) >= seconds * 1000.0) break;
    const auto t = Clock::now();
    session.run(feeds, {}, run_options);
    lat.push_back(ms_since(t));
    if (tty && iterations > 0 && (i % std::max(1, iterations / 50) == 0 || i + 1 == iterations))
      std::fprintf(stderr, "\r[%-50s] %d/%d",
                   std::string(static_cast<size_t>(50 * (i + 1) / iterations), '#').c_str(), i + 1,
                   iterations);
  }
  if (tty && iterations > 0) std::fprintf(stderr, "\n");
  const double total_s = ms_since(t_start) / 1000.0;
  const double p50 = percentile(lat, 50), p90 = percentile(lat, 90), p99 = percentile(lat, 99);
  const double throughput = lat.empty() ? 0 : static_cast<double>(lat.size()) * batch / total_s;
  if (args.has("profile")) write_profile(session, feeds, run_options, args.get("profile"));
  const double rss = peak_rss_mib();
  double l2 = -1;  // against an fp32 session on the same inputs, for reduced precisions
  if (opts.precision != "fp32") {
    SessionOptions fp32 = opts;
    fp32.precision = "fp32";
    Session reference(args.positional[0], fp32);
    l2 = relative_l2(reference.run(feeds, {}, run_options), session.run(feeds, {}, run_options));
  }
  if (args.has("json")) {
    std::printf(
        "{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"iterations\": %zu, \"load_ms\": "
        "%.3f, \"first_run_ms\": %.3f, "
        "\"p50_ms\": %.4f, \"p90_ms\": %.4f, \"p99_ms\": %.4f, \"throughput_per_s\": %.2f, "
        "\"peak_rss_mib\": %.1f%s}\n",
        args.positional[0].c_str(), batch, opts.threads, lat.size(), load_ms, first_ms, p50, p90,
        p99, throughput, rss,
        l2 >= 0 ? (", \"relative_l2_vs_fp32\": " + std::to_string(l2)).c_str() : "");
  } else {
    std::printf("model        %s (batch %d)\n", args.positional[0].c_str(), batch);
    std::printf("load         %.2f ms\nfirst run    %.2f ms\n", load_ms, first_ms);
    std::printf("latency      p50 %.3f ms   p90 %.3f ms   p99 %.3f ms   (%zu runs)\n", p50, p90,
                p99, lat.size());
    std::printf("throughput   %.1f samples/s\npeak rss     %.1f MiB\n", throughput, rss);
    if (l2 >= 0)
      std::printf("vs fp32      relative L2 %.3f%% (%s against fp32, same inputs)\n", 100 * l2,
                  opts.precision.c_str());
  }
  return 0;
}

}  // namespace volt::cli
