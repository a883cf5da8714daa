// volt test-onnx DIR... [--expect FILE]: runs ONNX backend test cases (a folder with
// model.onnx and test_data_set_N/, or a folder of such folders), compares outputs with
// rtol 1e-3 and atol 1e-7 (NaN equals NaN), prints one line per case and "N passed, M failed".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "loaders/loader.hpp"
#include "tools/cli_util.hpp"
#include "tools/commands.hpp"

namespace volt::cli {
namespace fs = std::filesystem;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

double elem(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float:
      return t.data<float>()[i];
    case DType::Double:
      return t.data<double>()[i];
    case DType::Float16:
      return static_cast<float>(t.data<Float16>()[i]);
    case DType::BFloat16:
      return static_cast<float>(t.data<BFloat16>()[i]);
    case DType::Int64:
      return static_cast<double>(t.data<int64_t>()[i]);
    case DType::Int32:
      return t.data<int32_t>()[i];
    case DType::Int16:
      return t.data<int16_t>()[i];
    case DType::Int8:
      return t.data<int8_t>()[i];
    case DType::UInt8:
      return t.data<uint8_t>()[i];
    case DType::UInt16:
      return t.data<uint16_t>()[i];
    case DType::UInt32:
      return t.data<uint32_t>()[i];
    case DType::UInt64:
      return static_cast<double>(t.data<uint64_t>()[i]);
    case DType::Bool:
      return t.data<bool>()[i];
    default:
      return 0;
  }
}

// Empty string when equal within tolerance; else what differs.
std::string compare_tensor(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + dtype_name(got.dtype()) + ", expected " +
           dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + shape_str(got.shape()) + ", expected " + shape_str(want.shape());
  if (got.dtype() == DType::String) {
    for (int64_t i = 0; i < got.numel(); ++i)
      if (got.data<std::string>()[i] != want.data<std::string>()[i])
        return "element " + std::to_string(i) + " is \"" + got.data<std::string>()[i] +
               "\", expected \"" + want.data<std::string>()[i] + "\"";
    return "";
  }
  if (got.dtype() == DType::Complex64 || got.dtype() == DType::Complex128) {
    const bool c64 = got.dtype() == DType::Complex64;
    for (int64_t i = 0; i < got.numel() * 2; ++i) {
      const double g =
          c64 ? static_cast<const float*>(got.raw())[i] : static_cast<const double*>(got.raw())[i];
      const double w = c64 ? static_cast<const float*>(want.raw())[i]
                           : static_cast<const double*>(want.raw())[i];
      if (std::abs(g - w) > kAtol + kRtol * std::abs(w))
        return "complex component " + std::to_string(i) + " differs";
    }
    return "";
  }
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double g = elem(got, i), w = elem(want, i);
    if (std::isnan(g) && std::isnan(w)) continue;
    if (g == w) continue;  // infinities
    if (!(std::abs(g - w) <= kAtol + kRtol * std::abs(w)))
      return "element " + std::to_string(i) + " is " + std::to_string(g) + ", expected " +
             std::to_string(w);
  }
  return "";
}

std::string compare_value(const Value& got, const Value& want) {
  if (want.is_none()) return got.is_none() ? "" : "expected an empty optional";
  if (got.is_none()) return "got an empty optional";
  if (want.is_sequence()) {
    if (!got.is_sequence()) return "expected a sequence";
    const auto &g = got.sequence_items(), &w = want.sequence_items();
    if (g.size() != w.size())
      return "sequence of " + std::to_string(g.size()) + ", expected " + std::to_string(w.size());
    for (size_t i = 0; i < g.size(); ++i) {
      const std::string d = compare_tensor(g[i], w[i]);
      if (!d.empty()) return "item " + std::to_string(i) + ": " + d;
    }
    return "";
  }
  if (!got.is_tensor()) return "expected a tensor";
  return compare_tensor(got.tensor(), want.tensor());
}

std::vector<fs::path> sorted_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path());
  // input_10.pb after input_9.pb
  std::sort(out.begin(), out.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      return std::atoi(p.stem().string().substr(prefix.size()).c_str());
    };
    return num(a) < num(b);
  });
  return out;
}

// ONNX 1.12's test data stores bfloat16 tensors as uint16 (numpy has no bfloat16): read them
// back as the bfloat16 the model declares.
Value as_declared(Value v, const ValueInfo& info) {
  if (info.dtype == DType::BFloat16 && v.is_tensor() && v.tensor().dtype() == DType::UInt16) {
    const Tensor& t = v.tensor();
    return Tensor::copy_of(DType::BFloat16, t.shape(), t.raw());
  }
  return v;
}

// Empty string on success; else why the case failed.
std::string run_case(const fs::path& dir, const std::string& device) {
  try {
    Session session((dir / "model.onnx").string(), SessionOptions{.threads = 0, .device = device});
    std::vector<fs::path> sets;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0)
        sets.push_back(e.path());
    std::sort(sets.begin(), sets.end());
    if (sets.empty()) return "no test_data_set_N folder";
    for (const auto& set : sets) {
      const auto in_files = sorted_files(set, "input_");
      const auto out_files = sorted_files(set, "output_");
      const auto& ins = session.inputs();
      const auto& outs = session.outputs();
      if (in_files.size() > ins.size())
        return set.filename().string() + ": " + std::to_string(in_files.size()) +
               " input files for " + std::to_string(ins.size()) + " model inputs";
      NamedValues feeds;
      for (size_t i = 0; i < in_files.size(); ++i)
        feeds.emplace_back(ins[i].name,
                           as_declared(read_value_pb(in_files[i].string(), ins[i].kind), ins[i]));
      const std::vector<Value> got = session.run(feeds);
      if (out_files.size() != outs.size())
        return set.filename().string() + ": " + std::to_string(out_files.size()) +
               " output files for " + std::to_string(outs.size()) + " model outputs";
      for (size_t i = 0; i < out_files.size(); ++i) {
        const Value want = as_declared(read_value_pb(out_files[i].string(), outs[i].kind), outs[i]);
        const std::string d = compare_value(got[i], want);
        if (!d.empty()) return set.filename().string() + " output '" + outs[i].name + "': " + d;
      }
    }
    return "";
  } catch (const std::exception& e) {
    std::string msg = e.what();
    return msg.empty() ? "error" : msg;
  }
}

void collect_cases(const fs::path& p, std::vector<fs::path>& out) {
  if (fs::exists(p / "model.onnx")) {
    out.push_back(p);
    return;
  }
  if (!fs::is_directory(p)) throw Error(ErrorCode::Io, p.string() + ": not a test case folder");
  std::vector<fs::path> subs;
  for (const auto& e : fs::directory_iterator(p))
    if (e.is_directory()) subs.push_back(e.path());
  std::sort(subs.begin(), subs.end());
  for (const auto& s : subs) collect_cases(s, out);
}

}  // namespace

int cmd_test_onnx(const Args& args) {
  std::set<std::string> expected;
  const bool has_expect = args.has("expect");
  if (has_expect) {
    std::ifstream in(args.get("expect"));
    if (!in) throw Error(ErrorCode::Io, args.get("expect") + ": cannot open");
    for (std::string line; std::getline(in, line);) {
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (!line.empty() && line[0] != '#') expected.insert(line);
    }
  }
  std::vector<fs::path> cases;
  for (const auto& p : args.positional) collect_cases(p, cases);
  int passed = 0, failed = 0, expected_failed = 0;
  for (const auto& c : cases) {
    const std::string name = c.parent_path().filename().string() + "/" + c.filename().string();
    const std::string why = run_case(c, args.get("device", "cpu"));
    if (why.empty()) {
      ++passed;
      std::printf("PASS %s\n", name.c_str());
    } else {
      ++failed;
      const bool listed = expected.count(name) != 0;
      if (listed) ++expected_failed;
      std::string first_line = why.substr(0, why.find('\n'));
      if (first_line.size() > 300) first_line = first_line.substr(0, 300) + "...";
      std::printf("FAIL %s%s: %s\n", name.c_str(),
                  listed ? " (REGRESSION: listed in --expect)" : "", first_line.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  if (has_expect) {
    if (expected_failed)
      std::printf("%d cases listed in %s failed\n", expected_failed, args.get("expect").c_str());
    return expected_failed ? 1 : 0;
  }
  return failed ? 1 : 0;
}

}  // namespace volt::cli
