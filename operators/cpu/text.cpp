// String and text ops that need no system locale: StringNormalizer (ASCII case mapping,
// stopwords) and TfIdfVectorizer (n-grams with skips over int64 or string tokens).
#include <algorithm>
#include <map>

#include "operators/registry.hpp"

namespace volt {
namespace {

std::string change_case(std::string s, int mode) {  // 0 none, 1 lower, 2 upper; ASCII only
  if (mode == 1)
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (mode == 2)
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

class StringNormalizer final : public Kernel {
 public:
  explicit StringNormalizer(const Node& n)
      : case_sensitive_(n.attr_int("is_case_sensitive", 0) != 0) {
    const std::string action = n.attr_string("case_change_action", "NONE");
    VOLT_CHECK(action == "NONE" || action == "LOWER" || action == "UPPER", InvalidModel,
               n.describe() + ": unknown case_change_action '" + action + "'");
    mode_ = action == "LOWER" ? 1 : action == "UPPER" ? 2 : 0;
    for (const auto& w : n.attr_strings("stopwords"))
      stopwords_.push_back(case_sensitive_ ? w : change_case(w, 1));
  }
  void infer(InferContext& ctx) const override {
    VOLT_CHECK(ctx.dtype(0) == DType::String, InvalidArgument,
               ctx.node().describe() + ": input must be strings");
    ctx.set_output_unknown(0, DType::String);
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    VOLT_CHECK(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1), InvalidArgument,
               ctx.node().describe() + ": input must be [C] or [1, C]");
    std::vector<std::string> kept;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const std::string& s = x.data<std::string>()[i];
      const std::string key = case_sensitive_ ? s : change_case(s, 1);
      if (std::find(stopwords_.begin(), stopwords_.end(), key) != stopwords_.end()) continue;
      kept.push_back(change_case(s, mode_));
    }
    if (kept.empty()) kept.push_back("");  // the spec's output for "everything removed"
    const int64_t c = static_cast<int64_t>(kept.size());
    Tensor& y = ctx.allocate_output(0, DType::String, x.rank() == 1 ? Shape{c} : Shape{1, c});
    std::copy(kept.begin(), kept.end(), y.data<std::string>());
  }

 private:
  bool case_sensitive_;
  int mode_ = 0;
  std::vector<std::string> stopwords_;
};

class TfIdfVectorizer final : public Kernel {
 public:
  explicit TfIdfVectorizer(const Node& n)
      : min_n_(n.attr_int("min_gram_length")),
        max_n_(n.attr_int("max_gram_length")),
        max_skip_(n.attr_int("max_skip_count")),
        weights_(n.attr_floats("weights")) {
    const std::string mode = n.attr_string("mode", "TF");
    VOLT_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF", InvalidModel,
               n.describe() + ": unknown mode '" + mode + "'");
    mode_ = mode == "TF" ? 0 : mode == "IDF" ? 1 : 2;
    const auto counts = n.attr_ints("ngram_counts"), indexes = n.attr_ints("ngram_indexes");
    const auto ints = n.attr_ints("pool_int64s");
    const auto strs = n.attr_strings("pool_strings");
    const int64_t pool = static_cast<int64_t>(strs.empty() ? ints.size() : strs.size());
    int64_t entry = 0;
    for (size_t g = 0; g < counts.size(); ++g) {
      const int64_t len = static_cast<int64_t>(g) + 1, begin = counts[g],
                    end = g + 1 < counts.size() ? counts[g + 1] : pool;
      VOLT_CHECK(begin <= end && end <= pool && (end - begin) % len == 0, InvalidModel,
                 n.describe() + ": ngram_counts do not match the pool");
      for (int64_t p = begin; p < end; p += len, ++entry) {
        std::vector<std::string> key;
        for (int64_t k = 0; k < len; ++k)
          key.push_back(strs.empty() ? std::to_string(ints[p + k]) : strs[p + k]);
        VOLT_CHECK(entry < static_cast<int64_t>(indexes.size()), InvalidModel,
                   n.describe() + ": ngram_indexes is too short");
        VOLT_CHECK(indexes[entry] >= 0, InvalidModel,
                   n.describe() + ": ngram_indexes must not be negative");
        table_[key] = indexes[entry];
        out_size_ = std::max(out_size_, indexes[entry] + 1);
      }
    }
    VOLT_CHECK(min_n_ >= 1 && min_n_ <= max_n_ && max_skip_ >= 0, InvalidModel,
               n.describe() + ": needs 1 <= min_gram_length <= max_gram_length and " +
                   "max_skip_count >= 0");
    VOLT_CHECK(mode_ == 0 || weights_.empty() || static_cast<int64_t>(weights_.size()) >= out_size_,
               InvalidModel, n.describe() + ": weights has fewer entries than the output");
    // No n-gram longer than the pool's longest can match.
    longest_ = static_cast<int64_t>(counts.size());
  }
  void infer(InferContext& ctx) const override {
    const Shape& s = ctx.shape(0);
    ctx.set_output(0, DType::Float, s.size() == 2 ? Shape{s[0], out_size_} : Shape{out_size_});
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t rows = x.rank() == 2 ? x.dim(0) : 1, cols = x.rank() == 2 ? x.dim(1) : x.numel();
    std::vector<std::string> tokens(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      switch (x.dtype()) {
        case DType::String:
          tokens[i] = x.data<std::string>()[i];
          break;
        case DType::Int64:
          tokens[i] = std::to_string(x.data<int64_t>()[i]);
          break;
        case DType::Int32:
          tokens[i] = std::to_string(x.data<int32_t>()[i]);
          break;
        default:
          ctx.error("input must be int32, int64 or string");
      }
    }
    float* y = ctx.output(0).data<float>();
    std::fill(y, y + ctx.output(0).numel(), 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> counts(static_cast<size_t>(out_size_), 0.0);
      for (int64_t n = min_n_; n <= std::min(max_n_, std::min(longest_, cols)); ++n) {
        // An n-gram with `skip` spans (n - 1)(skip + 1) + 1 tokens: larger skips fit no row.
        const int64_t skips = n == 1 ? 0 : std::min(max_skip_, (cols - 1) / (n - 1) - 1);
        for (int64_t skip = 0; skip <= skips; ++skip)
          for (int64_t start = 0; start + (n - 1) * (skip + 1) < cols; ++start) {
            std::vector<std::string> key;
            for (int64_t k = 0; k < n; ++k)
              key.push_back(tokens[r * cols + start + k * (skip + 1)]);
            auto it = table_.find(key);
            if (it != table_.end()) counts[it->second] += 1;
          }
      }
      for (int64_t i = 0; i < out_size_; ++i) {
        const double w = weights_.empty() ? 1.0 : weights_[i];
        const double c = counts[i];
        y[r * out_size_ + i] = static_cast<float>(mode_ == 0   ? c
                                                  : mode_ == 1 ? (c > 0 ? w : 0)
                                                               : c * w);
      }
    }
  }

 private:
  int64_t min_n_, max_n_, max_skip_, longest_ = 0;
  std::vector<float> weights_;
  int mode_ = 0;
  std::map<std::vector<std::string>, int64_t> table_;
  int64_t out_size_ = 0;
};

}  // namespace

VOLT_REGISTER_KERNEL(string_normalizer, {.op = "StringNormalizer",
                                         .since = 10,
                                         .create = make_kernel<StringNormalizer>});
VOLT_REGISTER_KERNEL(tfidf_vectorizer,
                     {.op = "TfIdfVectorizer", .since = 9, .create = make_kernel<TfIdfVectorizer>});

}  // namespace volt
