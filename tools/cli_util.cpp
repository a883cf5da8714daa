#include "tools/cli_util.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "loaders/npy.hpp"
#include "tools/commands.hpp"

namespace volt::cli {

std::string Args::get(const std::string& k, const std::string& fallback) const {
  auto it = flags.find(k);
  return it == flags.end() ? fallback : it->second;
}

std::vector<std::string> Args::all(const std::string& k) const {
  std::vector<std::string> out;
  for (auto [it, end] = flags.equal_range(k); it != end; ++it) out.push_back(it->second);
  return out;
}

int Args::get_int(const std::string& k, int fallback) const {
  if (!has(k)) return fallback;
  const std::string v = get(k);
  try {
    size_t used = 0;
    const int n = std::stoi(v, &used);
    if (used == v.size()) return n;
  } catch (const std::exception&) {
  }
  throw Error(ErrorCode::InvalidArgument, "--" + k + ": '" + v + "' is not an integer");
}

SessionOptions session_options_from(const Args& args) {
  SessionOptions opts;
  opts.threads = args.get_int("threads", 0);
  opts.precision = args.get("precision", "fp32");
  opts.device = args.get("device", "cpu");
  const std::string winograd = args.get("winograd", "on");
  if (winograd != "on" && winograd != "off")
    throw Error(ErrorCode::InvalidArgument, "--winograd: '" + winograd + "' is not on or off");
  opts.winograd = winograd == "on";
  if (args.has("memory-limit")) {
    const std::string v = args.get("memory-limit");
    size_t used = 0;
    unsigned long long n = 0;
    try {
      n = std::stoull(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const std::string suffix = used ? v.substr(used) : "";
    const int shift = suffix.empty()  ? 0
                      : suffix == "K" ? 10
                      : suffix == "M" ? 20
                      : suffix == "G" ? 30
                                      : -1;
    if (!used || shift < 0 || n > (~0ULL >> shift))
      throw Error(ErrorCode::InvalidArgument,
                  "--memory-limit: '" + v + "' is not a byte count (like 512M or 2G)");
    opts.memory_limit = static_cast<size_t>(n << shift);
  }
  // --calibrate NAME=FILE.npy (repeatable): with --precision int8, static scales from this batch.
  for (const auto& spec : args.all("calibrate")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(ErrorCode::InvalidArgument, "--calibrate '" + spec + "' is not NAME=FILE.npy");
    opts.calibration.emplace_back(spec.substr(0, eq), read_npy(spec.substr(eq + 1)));
  }
  if (!opts.calibration.empty() && opts.precision != "int8")
    throw Error(ErrorCode::InvalidArgument, "--calibrate needs --precision int8");
  return opts;
}

RunOptions run_options_from(const Args& args) {
  RunOptions r;
  r.timeout_ms = args.get_int("timeout-ms", 0);
  if (r.timeout_ms < 0) throw Error(ErrorCode::InvalidArgument, "--timeout-ms must be positive");
  return r;
}

double Args::get_double(const std::string& k, double fallback) const {
  if (!has(k)) return fallback;
  const std::string v = get(k);
  try {
    size_t used = 0;
    const double d = std::stod(v, &used);
    if (used == v.size()) return d;
  } catch (const std::exception&) {
  }
  throw Error(ErrorCode::InvalidArgument, "--" + k + ": '" + v + "' is not a number");
}

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates,
                       const std::string& prefix) {
  // Levenshtein distance, one row at a time.
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  const std::string* best = nullptr;
  size_t best_distance = 0;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (!best || d < best_distance) best = &c, best_distance = d;
  }
  // Near: at most a third of the word's letters differ (two for short words).
  if (!best || best_distance > std::max<size_t>(2, word.size() / 3)) return "";
  return "; did you mean '" + prefix + *best + "'?";
}

Args parse_args(int argc, char** argv, int first, const Command& command) {
  std::vector<std::string> names;
  for (const Option& o : command.options) names.push_back(o.name);
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "--") {
      a.positional.push_back(s);
      continue;
    }
    s = s.substr(2);
    const size_t eq = s.find('=');
    const std::string name = s.substr(0, eq);
    auto option = std::find_if(command.options.begin(), command.options.end(),
                               [&](const Option& o) { return o.name == name; });
    if (option == command.options.end())
      throw Error(ErrorCode::InvalidArgument, "unknown option '--" + name + "' for 'volt " +
                                                  command.name + "'" +
                                                  suggestion(name, names, "--") + " (volt " +
                                                  command.name + " --help lists them)");
    if (option->value.empty()) {
      if (eq != std::string::npos)
        throw Error(ErrorCode::InvalidArgument, "--" + name + " takes no value");
      a.flags.emplace(name, "1");
    } else if (eq != std::string::npos) {
      a.flags.emplace(name, s.substr(eq + 1));
    } else {
      if (i + 1 >= argc)
        throw Error(ErrorCode::InvalidArgument, "--" + name + " needs a value: " + option->value);
      a.flags.emplace(name, argv[++i]);
    }
  }
  return a;
}

std::map<std::string, Shape> parse_shapes(const std::vector<std::string>& specs) {
  std::map<std::string, Shape> out;
  for (const auto& spec : specs) {
    const size_t eq = spec.rfind('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::InvalidArgument, "--shape '" + spec + "' is not NAME=D1xD2...");
    Shape s;
    std::stringstream dims(spec.substr(eq + 1));
    std::string d;
    while (std::getline(dims, d, 'x')) {
      try {
        size_t used = 0;
        const long long v = std::stoll(d, &used);
        if (used != d.size() || v < 0) throw std::invalid_argument("dim");
        s.push_back(v);
      } catch (const std::exception&) {
        throw Error(ErrorCode::InvalidArgument,
                    "--shape '" + spec + "': '" + d + "' is not a dimension");
      }
    }
    out[spec.substr(0, eq)] = s;
  }
  return out;
}

std::map<std::string, std::pair<int64_t, int64_t>> parse_ranges(
    const std::vector<std::string>& specs) {
  std::map<std::string, std::pair<int64_t, int64_t>> out;
  for (const auto& spec : specs) {
    const size_t eq = spec.rfind('='), colon = spec.rfind(':');
    try {
      if (eq == std::string::npos || colon == std::string::npos || colon < eq)
        throw std::invalid_argument("range");
      const int64_t lo = std::stoll(spec.substr(eq + 1, colon - eq - 1)),
                    hi = std::stoll(spec.substr(colon + 1));
      if (hi <= lo) throw std::invalid_argument("range");
      out[spec.substr(0, eq)] = {lo, hi};
    } catch (const std::exception&) {
      throw Error(ErrorCode::InvalidArgument,
                  "--range '" + spec + "' is not NAME=LO:HI with LO < HI");
    }
  }
  return out;
}

Shape concrete_shape(const ValueInfo& info, const std::map<std::string, Shape>& overrides,
                     int64_t batch) {
  auto it = overrides.find(info.name);
  if (it != overrides.end()) return it->second;
  Shape s;
  for (size_t i = 0; i < info.shape.size(); ++i)
    s.push_back(info.shape[i].is_fixed() ? info.shape[i].value : (i == 0 ? batch : 1));
  return s;
}

Tensor random_tensor(DType dtype, const Shape& shape, std::mt19937_64& rng,
                     std::pair<int64_t, int64_t> range) {
  Tensor t = Tensor::empty(dtype, shape);
  const int64_t n = t.numel();
  std::uniform_real_distribution<double> uf(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> ui(range.first, range.second - 1);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::Float:
        t.data<float>()[i] = static_cast<float>(uf(rng));
        break;
      case DType::Double:
        t.data<double>()[i] = uf(rng);
        break;
      case DType::Float16:
        t.data<Float16>()[i] = Float16(static_cast<float>(uf(rng)));
        break;
      case DType::BFloat16:
        t.data<BFloat16>()[i] = BFloat16(static_cast<float>(uf(rng)));
        break;
      case DType::Int64:
        t.data<int64_t>()[i] = ui(rng);
        break;
      case DType::Int32:
        t.data<int32_t>()[i] = static_cast<int32_t>(ui(rng));
        break;
      case DType::Int16:
        t.data<int16_t>()[i] = static_cast<int16_t>(ui(rng));
        break;
      case DType::Int8:
        t.data<int8_t>()[i] = static_cast<int8_t>(ui(rng));
        break;
      case DType::UInt8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(ui(rng));
        break;
      case DType::UInt16:
        t.data<uint16_t>()[i] = static_cast<uint16_t>(ui(rng));
        break;
      case DType::UInt32:
        t.data<uint32_t>()[i] = static_cast<uint32_t>(ui(rng));
        break;
      case DType::UInt64:
        t.data<uint64_t>()[i] = static_cast<uint64_t>(ui(rng));
        break;
      case DType::Bool:
        t.data<bool>()[i] = (rng() & 1) != 0;
        break;
      case DType::String:
        t.data<std::string>()[i] = std::to_string(ui(rng));
        break;
      default:
        throw Error(ErrorCode::NotImplemented,
                    std::string("cannot make random ") + dtype_name(dtype) + " inputs");
    }
  }
  return t;
}

namespace {
template <class T>
double as_double(const Tensor& t, int64_t i) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
    return static_cast<float>(t.data<T>()[i]);
  else
    return static_cast<double>(t.data<T>()[i]);
}

double element(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float:
      return as_double<float>(t, i);
    case DType::Double:
      return as_double<double>(t, i);
    case DType::Float16:
      return as_double<Float16>(t, i);
    case DType::BFloat16:
      return as_double<BFloat16>(t, i);
    case DType::Int64:
      return as_double<int64_t>(t, i);
    case DType::Int32:
      return as_double<int32_t>(t, i);
    case DType::Int16:
      return as_double<int16_t>(t, i);
    case DType::Int8:
      return as_double<int8_t>(t, i);
    case DType::UInt8:
      return as_double<uint8_t>(t, i);
    case DType::UInt16:
      return as_double<uint16_t>(t, i);
    case DType::UInt32:
      return as_double<uint32_t>(t, i);
    case DType::UInt64:
      return as_double<uint64_t>(t, i);
    case DType::Bool:
      return t.data<bool>()[i] ? 1 : 0;
    default:
      return NAN;
  }
}
}  // namespace

std::string summarize(const Value& v) {
  if (v.is_none()) return "none (empty optional)";
  if (v.is_sequence())
    return "sequence of " + std::to_string(v.sequence_items().size()) + " " +
           dtype_name(v.sequence_dtype()) + " tensors";
  const Tensor& t = v.tensor();
  std::ostringstream out;
  out << dtype_name(t.dtype()) << shape_str(t.shape());
  if (t.dtype() == DType::String) {
    if (t.numel()) out << " first=\"" << t.data<std::string>()[0] << "\"";
    return out.str();
  }
  if (t.numel() == 0) return out.str();
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = element(t, i);
    mn = std::min(mn, x);
    mx = std::max(mx, x);
    sum += x;
  }
  out << " min=" << mn << " max=" << mx << " mean=" << sum / static_cast<double>(t.numel()) << " [";
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 6); ++i)
    out << (i ? ", " : "") << element(t, i);
  out << (t.numel() > 6 ? ", ...]" : "]");
  return out.str();
}

std::string safe_file_name(const std::string& name) {
  std::string out = name;
  for (char& c : out)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

NamedValues feeds_from(const Args& args, const Session& session, int64_t batch, uint64_t seed) {
  const auto shapes = parse_shapes(args.all("shape"));
  const auto ranges = parse_ranges(args.all("range"));

  std::map<std::string, std::string> sources;
  for (const auto& spec : args.all("input")) {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos)
      throw Error(ErrorCode::InvalidArgument,
                  "--input '" + spec + "' is not NAME=FILE.npy or NAME=random");
    sources[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  std::mt19937_64 rng(seed);
  NamedValues feeds;
  for (const auto& info : session.inputs()) {
    auto it = sources.find(info.name);
    const std::string src = it == sources.end() ? "random" : it->second;
    if (src == "random") {
      auto r = ranges.find(info.name);
      feeds.emplace_back(
          info.name,
          random_tensor(info.dtype, concrete_shape(info, shapes, batch), rng,
                        r == ranges.end() ? std::pair<int64_t, int64_t>{0, 10} : r->second));
    } else {
      feeds.emplace_back(info.name, read_npy(src));
    }
    if (it != sources.end()) sources.erase(it);
  }
  if (!sources.empty())
    throw Error(ErrorCode::InvalidArgument,
                "the model has no input '" + sources.begin()->first + "'");
  return feeds;
}

}  // namespace volt::cli
