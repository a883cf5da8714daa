// Einsum (explicit and implicit output, repeated labels, ellipsis with broadcasting; two f32
// operands that make a batched matrix product on oneDNN's sgemm), Det and its gradient.
#include <dnnl.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>

#include "operators/common/dispatch.hpp"
#include "operators/common/parallel.hpp"
#include "operators/common/strided_gather.hpp"
#include "operators/common/tensor_values.hpp"
#include "operators/registry.hpp"

namespace volt {
namespace {

struct EinsumPlan {
  std::vector<std::vector<int>> operand_labels;  // label ids per operand axis
  std::vector<int> output_labels;
  std::vector<int64_t> label_dim;  // by label id
};

EinsumPlan plan_einsum(const std::string& equation, const std::vector<Shape>& shapes,
                       const Node& node) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  VOLT_CHECK(terms.size() == shapes.size(), InvalidArgument,
             node.describe() + ": the equation has " + std::to_string(terms.size()) +
                 " operands, the node " + std::to_string(shapes.size()));
  EinsumPlan p;
  std::map<char, int> ids;
  // Ellipsis dims get ids of their own, aligned to the right across operands.
  size_t ellipsis_rank = 0;
  for (size_t k = 0; k < terms.size(); ++k) {
    const size_t dots = terms[k].find("...");
    if (dots == std::string::npos) continue;
    const size_t letters = terms[k].size() - 3;
    VOLT_CHECK(
        shapes[k].size() >= letters, InvalidArgument,
        node.describe() + ": operand " + std::to_string(k) + " has too few axes for its labels");
    ellipsis_rank = std::max(ellipsis_rank, shapes[k].size() - letters);
  }
  for (size_t e = 0; e < ellipsis_rank; ++e) p.label_dim.push_back(1);
  auto id_of = [&](char c) {
    auto it = ids.find(c);
    if (it != ids.end()) return it->second;
    const int id = static_cast<int>(p.label_dim.size());
    p.label_dim.push_back(-1);
    ids[c] = id;
    return id;
  };
  std::map<int, int> counts;
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<int> labels;
    const std::string& t = terms[k];
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        const size_t letters = t.size() - 3, er = shapes[k].size() - letters;
        for (size_t e = 0; e < er; ++e) labels.push_back(static_cast<int>(ellipsis_rank - er + e));
        i += 2;
        continue;
      }
      VOLT_CHECK(std::isalpha(static_cast<unsigned char>(t[i])), InvalidArgument,
                 node.describe() + ": bad label '" + std::string(1, t[i]) + "'");
      labels.push_back(id_of(t[i]));
      ++counts[labels.back()];
    }
    VOLT_CHECK(labels.size() == shapes[k].size(), InvalidArgument,
               node.describe() + ": operand " + std::to_string(k) + " has " +
                   std::to_string(shapes[k].size()) + " axes, its term '" + t + "' " +
                   std::to_string(labels.size()));
    for (size_t a = 0; a < labels.size(); ++a) {
      int64_t& d = p.label_dim[labels[a]];
      const int64_t s = shapes[k][a];
      const bool ellipsis = labels[a] < static_cast<int>(ellipsis_rank);
      if (d == -1 || (ellipsis && d == 1))
        d = s;
      else
        VOLT_CHECK(d == s || (ellipsis && s == 1), InvalidArgument,
                   node.describe() + ": label sizes disagree (" + std::to_string(d) + " vs " +
                       std::to_string(s) + ")");
    }
    p.operand_labels.push_back(std::move(labels));
  }
  for (size_t e = 0; e < ellipsis_rank; ++e) p.output_labels.push_back(static_cast<int>(e));
  if (arrow != std::string::npos) {
    const std::string rhs = eq.substr(arrow + 2);
    for (size_t i = 0; i < rhs.size(); ++i) {
      if (rhs.compare(i, 3, "...") == 0) {
        i += 2;
        continue;
      }
      VOLT_CHECK(ids.count(rhs[i]), InvalidArgument,
                 node.describe() + ": output label '" + std::string(1, rhs[i]) +
                     "' is not in any operand");
      p.output_labels.push_back(ids[rhs[i]]);
    }
  } else {  // implicit: labels seen once, in alphabetical order
    for (const auto& [c, id] : ids)
      if (counts[id] == 1) p.output_labels.push_back(id);
  }
  return p;
}

// How many elements a group of labels spans (the product of their sizes).
int64_t group_size(const std::vector<int>& labels, const EinsumPlan& p) {
  int64_t v = 1;
  for (int l : labels) v *= p.label_dim[static_cast<size_t>(l)];
  return v;
}

// A tensor's strides by label id (0 for labels it lacks), its axes labelled by `labels`.
std::vector<int64_t> label_strides(const Tensor& t, const std::vector<int>& labels,
                                   const EinsumPlan& p) {
  std::vector<int64_t> by_label(p.label_dim.size(), 0);
  int64_t s = 1;
  for (size_t ax = labels.size(); ax-- > 0;) {
    by_label[static_cast<size_t>(labels[ax])] = s;
    s *= t.dim(static_cast<int64_t>(ax));
  }
  return by_label;
}

// An Einsum's labels by role: in both operands and the output (batch), in A and the output (M),
// in B and the output (N), summed (K, in both operands).
struct ProductLabels {
  std::vector<int> batch, m, n, k;
};

// A label group read as one axis of a tensor whose strides by label are `st` (labels of size 1
// skipped): its stride (0 for a group of one element), or nullopt where the labels do not run
// as one axis, each label's stride its inner neighbour's times that one's size.
std::optional<int64_t> merged_stride(const std::vector<int>& group, const std::vector<int64_t>& st,
                                     const EinsumPlan& p) {
  std::optional<int64_t> stride;
  int64_t next = 0;
  for (size_t i = group.size(); i-- > 0;) {
    const auto l = static_cast<size_t>(group[i]);
    if (p.label_dim[l] == 1) continue;
    if (stride && st[l] != next) return std::nullopt;
    if (!stride) stride = st[l];
    next = st[l] * p.label_dim[l];
  }
  return stride.value_or(0);
}

// A matrix of `rows` × `cols` labels as sgemm reads it in place: transposed or not, and its
// leading dimension.
struct StridedMatrix {
  bool ok = false, transposed = false;
  int64_t ld = 0;
};
StridedMatrix strided_matrix(const std::vector<int>& rows, const std::vector<int>& cols,
                             const std::vector<int64_t>& st, const EinsumPlan& p,
                             bool may_transpose) {
  const auto rs = merged_stride(rows, st, p), cs = merged_stride(cols, st, p);
  const int64_t nr = group_size(rows, p), nc = group_size(cols, p);
  if (!rs || !cs) return {};
  if (nc == 1 || *cs == 1) return {true, false, nr == 1 ? std::max<int64_t>(nc, 1) : *rs};
  if (may_transpose && (nr == 1 || *rs == 1)) return {true, true, nc == 1 ? 1 : *cs};
  return {};
}

// The product with every operand and the output read in place by sgemm's leading dimensions
// (no gathered copies, no product buffer to scatter): M or N labels that do not run as one axis
// of some tensor are iterated like batch labels, as many products as their combinations. A
// mixture of experts' `btd,edf->btef` is a product per expert e on B's slice and Y's columns,
// and `btef,efd->bted` reads h and writes y with row strides of e·f and e·d: 8 MiB of gathers
// and a 4 MiB product buffer a run before. False where a summed group does not run as one axis
// or the iterated products would be small.
bool einsum_strided(const EinsumPlan& p, ProductLabels g, const Tensor& a, const Tensor& b,
                    Tensor& y, int threads) {
  const auto sa = label_strides(a, p.operand_labels[0], p),
             sb = label_strides(b, p.operand_labels[1], p),
             sy = label_strides(y, p.output_labels, p);
  bool peeled = false;
  StridedMatrix ma, mb, my;
  for (;;) {
    ma = strided_matrix(g.m, g.k, sa, p, true);
    mb = strided_matrix(g.k, g.n, sb, p, true);
    my = strided_matrix(g.m, g.n, sy, p, false);
    if (ma.ok && mb.ok && my.ok) break;
    if (!merged_stride(g.k, sa, p) || !merged_stride(g.k, sb, p)) return false;
    // The outermost label of the group that does not run as one axis becomes a loop.
    const bool m_runs = merged_stride(g.m, sa, p) && merged_stride(g.m, sy, p);
    std::vector<int>& peel = m_runs ? g.n : g.m;
    if (peel.empty() || (m_runs && merged_stride(g.n, sb, p) && merged_stride(g.n, sy, p)))
      return false;  // (both groups run as axes: the layouts themselves do not fit sgemm)
    g.batch.push_back(peel.front());
    peel.erase(peel.begin());
    peeled = true;
  }
  const int64_t loops = group_size(g.batch, p), mt = group_size(g.m, p), nt = group_size(g.n, p),
                kt = group_size(g.k, p);
  if (peeled && mt * nt * kt < (int64_t{1} << 15)) return false;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  std::atomic<bool> failed{false};
  auto one = [&](int64_t i) {
    int64_t oa = 0, ob = 0, oy = 0;
    for (size_t j = g.batch.size(); j-- > 0;) {
      const auto l = static_cast<size_t>(g.batch[j]);
      const int64_t at = i % p.label_dim[l];
      i /= p.label_dim[l];
      oa += at * sa[l];
      ob += at * sb[l];
      oy += at * sy[l];
    }
    const dnnl_status_t st =
        dnnl_sgemm(ma.transposed ? 'T' : 'N', mb.transposed ? 'T' : 'N', mt, nt, kt, 1.0f, pa + oa,
                   ma.ld, pb + ob, mb.ld, 0.0f, py + oy, my.ld);
    if (st != dnnl_success) failed = true;
  };
  parallel_for(loops, loops > 1 && threads > 1, one);
  VOLT_CHECK(!failed, Runtime, "Einsum: oneDNN sgemm failed");
  return true;
}

// Two f32 operands as a batched matrix product, the form attention and bilinear layers
// write: each label is a batch label (in both operands and the output), an M label (the first
// operand and the output), an N label (the second and the output) or a K label (both operands,
// summed). Each operand is read in place when its axes already run [batch, M, K] or
// [batch, K, M] (N likewise), else gathered into that order once; the products are oneDNN's
// sgemm, batches spread over the threads. False (the general loop) for anything else: repeated
// labels (diagonals), labels summed within one operand, broadcast ellipsis axes.
bool einsum_as_gemm(const EinsumPlan& p, const Tensor& a, const Tensor& b, Tensor& y, int threads) {
  if (p.operand_labels.size() != 2 || a.dtype() != DType::Float || b.dtype() != DType::Float)
    return false;
  const size_t nl = p.label_dim.size();
  std::vector<int> where(nl, 0);  // bits: 1 in A, 2 in B, 4 in the output
  const Tensor* operands[2] = {&a, &b};
  for (int k = 0; k < 2; ++k) {
    const auto& labels = p.operand_labels[static_cast<size_t>(k)];
    for (size_t ax = 0; ax < labels.size(); ++ax) {
      int& w = where[static_cast<size_t>(labels[ax])];
      if (w & (1 << k)) return false;  // a repeated label
      if (operands[k]->dim(static_cast<int64_t>(ax)) != p.label_dim[labels[ax]]) return false;
      w |= 1 << k;
    }
  }
  for (int l : p.output_labels) {
    if (where[static_cast<size_t>(l)] & 4) return false;
    where[static_cast<size_t>(l)] |= 4;
  }
  std::vector<int> batch, m, n, k;
  for (int l : p.output_labels) {
    const int w = where[static_cast<size_t>(l)];
    (w == 7 ? batch : w == 5 ? m : w == 6 ? n : batch).push_back(l);
    if (w != 7 && w != 5 && w != 6) return false;
  }
  for (int l : p.operand_labels[0])
    if (where[static_cast<size_t>(l)] == 3) k.push_back(l);
  for (size_t l = 0; l < nl; ++l)
    if (where[l] == 1 || where[l] == 2) return false;  // summed within one operand
  const int64_t bt = group_size(batch, p), mt = group_size(m, p), nt = group_size(n, p),
                kt = group_size(k, p);
  float* py = y.data<float>();
  if (y.numel() == 0) return true;
  if (kt == 0) {
    std::fill(py, py + y.numel(), 0.0f);
    return true;
  }
  // An operand's strides by label, and the order [batch, rows, cols] or [batch, cols, rows]
  // that reads it in place (`transposed`), else a gathered copy in the first.
  auto layout = [&](const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& st,
                    std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
    shape.clear();
    strides.clear();
    for (const auto& g : groups)
      for (int l : g) {
        shape.push_back(p.label_dim[static_cast<size_t>(l)]);
        strides.push_back(st[static_cast<size_t>(l)]);
      }
  };
  if (einsum_strided(p, {batch, m, n, k}, a, b, y, threads)) return true;
  std::vector<float> copies[2];
  const float* data[2];
  bool transposed[2];
  for (int op = 0; op < 2; ++op) {
    const Tensor& t = *operands[op];
    const auto st = label_strides(t, p.operand_labels[static_cast<size_t>(op)], p);
    const std::vector<int>& rows = op == 0 ? m : k;
    const std::vector<int>& cols = op == 0 ? k : n;
    std::vector<int64_t> shape, strides;
    layout({batch, rows, cols}, st, shape, strides);
    data[op] = t.data<float>();
    transposed[op] = false;
    if (is_one_run(shape, strides)) continue;
    std::vector<int64_t> tshape, tstrides;
    layout({batch, cols, rows}, st, tshape, tstrides);
    if (is_one_run(tshape, tstrides)) {
      transposed[op] = true;
      continue;
    }
    copies[op].resize(static_cast<size_t>(t.numel()));
    strided_gather(t.data<float>(), copies[op].data(), shape, strides);
    data[op] = copies[op].data();
  }
  // The product in [batch, M, N]: y itself when the output's labels run in that order.
  const auto yst = label_strides(y, p.output_labels, p);
  std::vector<int64_t> yshape, ystrides;
  layout({batch, m, n}, yst, yshape, ystrides);
  const bool in_place = is_one_run(yshape, ystrides);
  std::vector<float> product_buffer;
  if (!in_place) product_buffer.resize(static_cast<size_t>(y.numel()));
  float* c = in_place ? py : product_buffer.data();
  std::atomic<bool> failed{false};
  auto one = [&](int64_t i) {
    const dnnl_status_t st =
        dnnl_sgemm(transposed[0] ? 'T' : 'N', transposed[1] ? 'T' : 'N', mt, nt, kt, 1.0f,
                   data[0] + i * mt * kt, transposed[0] ? mt : kt, data[1] + i * kt * nt,
                   transposed[1] ? kt : nt, 0.0f, c + i * mt * nt, nt);
    if (st != dnnl_success) failed = true;
  };
  // Batches across the threads (each product on one), or one product on all of them.
  parallel_for(bt, bt > 1 && threads > 1, one);
  VOLT_CHECK(!failed, Runtime, "Einsum: oneDNN sgemm failed");
  if (!in_place) {
    // y's axes from the product's: the product's stride for each output label.
    std::vector<int64_t> pst(nl, 0);
    int64_t s = 1;
    for (const auto* g : {&n, &m, &batch})
      for (size_t i = g->size(); i-- > 0;) {
        pst[static_cast<size_t>((*g)[i])] = s;
        s *= p.label_dim[static_cast<size_t>((*g)[i])];
      }
    std::vector<int64_t> shape, strides;
    for (int l : p.output_labels) {
      shape.push_back(p.label_dim[static_cast<size_t>(l)]);
      strides.push_back(pst[static_cast<size_t>(l)]);
    }
    strided_gather(static_cast<const float*>(c), py, shape, strides);
  }
  return true;
}

class Einsum final : public Kernel {
 public:
  explicit Einsum(const Node& n) : equation_(n.attr_string("equation", "")) {}
  void infer(InferContext& ctx) const override {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < ctx.input_count(); ++i) shapes.push_back(ctx.shape(i));
    const EinsumPlan p = plan_einsum(equation_, shapes, ctx.node());
    Shape out;
    for (int l : p.output_labels) out.push_back(p.label_dim[l]);
    ctx.set_output(0, ctx.dtype(0), out);
  }
  void run(RunContext& ctx) const override {
    std::vector<Shape> shapes;
    for (size_t i = 0; i < ctx.input_count(); ++i) shapes.push_back(ctx.input(i).shape());
    const EinsumPlan p = plan_einsum(equation_, shapes, ctx.node());
    if (ctx.input_count() == 2 &&
        einsum_as_gemm(p, ctx.input(0), ctx.input(1), ctx.output(0), ctx.threads()))
      return;
    const size_t nl = p.label_dim.size();
    // Output labels first, then the summed ones; walk every combination.
    std::vector<int> order = p.output_labels;
    for (size_t l = 0; l < nl; ++l)
      if (std::find(order.begin(), order.end(), static_cast<int>(l)) == order.end())
        order.push_back(static_cast<int>(l));
    int64_t out_n = 1, sum_n = 1;
    for (size_t i = 0; i < order.size(); ++i)
      (i < p.output_labels.size() ? out_n : sum_n) *= p.label_dim[order[i]];
    std::vector<std::vector<int64_t>> strides(p.operand_labels.size(), std::vector<int64_t>(nl, 0));
    for (size_t k = 0; k < p.operand_labels.size(); ++k) {
      int64_t s = 1;
      for (size_t a = p.operand_labels[k].size(); a-- > 0;) {
        if (shapes[k][a] != 1)
          strides[k][p.operand_labels[k][a]] += s;  // repeated labels add up: a diagonal
        s *= shapes[k][a];
      }
    }
    Tensor& y = ctx.output(0);
    dispatch_numeric(y.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      using C = std::conditional_t<std::is_same_v<T, bool>, int, typename Compute<T>::type>;
      T* py = static_cast<T*>(y.raw());
      std::vector<int64_t> idx(nl);
      for (int64_t o = 0; o < out_n; ++o) {
        C acc = 0;
        for (int64_t s = 0; s < sum_n; ++s) {
          int64_t rem = s;
          for (size_t i = order.size(); i-- > p.output_labels.size();) {
            idx[order[i]] = rem % p.label_dim[order[i]];
            rem /= p.label_dim[order[i]];
          }
          rem = o;
          for (size_t i = p.output_labels.size(); i-- > 0;) {
            idx[order[i]] = rem % p.label_dim[order[i]];
            rem /= p.label_dim[order[i]];
          }
          C prod = 1;
          for (size_t k = 0; k < strides.size(); ++k) {
            int64_t off = 0;
            for (size_t l = 0; l < nl; ++l) off += idx[l] * strides[k][l];
            prod *= static_cast<C>(static_cast<const T*>(ctx.input(k).raw())[off]);
          }
          acc += prod;
        }
        py[o] = static_cast<T>(acc);
      }
    });
  }

 private:
  std::string equation_;
};

// The determinant of the m x m matrix `a` (row-major), by LU with partial pivoting in double.
double determinant(std::vector<double> a, int64_t m) {
  double det = 1;
  for (int64_t c = 0; c < m; ++c) {
    int64_t piv = c;
    for (int64_t r = c + 1; r < m; ++r)
      if (std::abs(a[r * m + c]) > std::abs(a[piv * m + c])) piv = r;
    if (a[piv * m + c] == 0) return 0;
    if (piv != c) {
      for (int64_t j = 0; j < m; ++j) std::swap(a[c * m + j], a[piv * m + j]);
      det = -det;
    }
    det *= a[c * m + c];
    for (int64_t r = c + 1; r < m; ++r) {
      const double f = a[r * m + c] / a[c * m + c];
      for (int64_t j = c; j < m; ++j) a[r * m + j] -= f * a[c * m + j];
    }
  }
  return det;
}

// Calls f(k, matrix k as doubles) for each m x m matrix of x [..., m, m].
template <class F>
void for_each_matrix(const Tensor& x, F&& f) {
  const int64_t m = x.dim(x.rank() - 1), mats = (m != 0) ? x.numel() / (m * m) : 0;
  const auto all = to_doubles(x);
  for (int64_t k = 0; k < mats; ++k)
    f(k, std::vector<double>(all.begin() + k * m * m, all.begin() + (k + 1) * m * m));
}

class Det final : public Kernel {
 public:
  explicit Det(const Node&) {}
  void infer(InferContext& ctx) const override {
    const Shape& s = ctx.shape(0);
    VOLT_CHECK(s.size() >= 2 && s[s.size() - 1] == s[s.size() - 2], InvalidArgument,
               ctx.node().describe() + ": input must be [..., M, M]");
    ctx.set_output(0, ctx.dtype(0), Shape(s.begin(), s.end() - 2));
  }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(0);
    const int64_t m = x.dim(x.rank() - 1);
    std::vector<double> dets(static_cast<size_t>(ctx.output(0).numel()));
    for_each_matrix(x, [&](int64_t k, std::vector<double> a) { dets[k] = determinant(a, m); });
    from_doubles(ctx.output(0), dets);
  }
};

// Det's gradient, inputs (dY, X): d det(A) / dA is A's cofactor matrix (det(A) inv(A)^T where A
// is invertible, and still defined where it is not), each cofactor a determinant of a minor.
class DetGrad final : public Kernel {
 public:
  explicit DetGrad(const Node&) {}
  void infer(InferContext& ctx) const override { ctx.set_output(0, ctx.dtype(1), ctx.shape(1)); }
  void run(RunContext& ctx) const override {
    const Tensor& x = ctx.input(1);
    const int64_t m = x.dim(x.rank() - 1);
    const auto dy = to_doubles(ctx.input(0));
    std::vector<double> dx(static_cast<size_t>(x.numel()));
    for_each_matrix(x, [&](int64_t k, const std::vector<double>& a) {
      std::vector<double> minor(static_cast<size_t>((m - 1) * (m - 1)));
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < m; ++j) {
          size_t at = 0;
          for (int64_t r = 0; r < m; ++r)
            for (int64_t c = 0; c < m; ++c)
              if (r != i && c != j) minor[at++] = a[r * m + c];
          const double sign = (i + j) % 2 ? -1.0 : 1.0;
          dx[k * m * m + i * m + j] = dy[k] * sign * (m == 1 ? 1.0 : determinant(minor, m - 1));
        }
    });
    from_doubles(ctx.output(0), dx);
  }
};

}  // namespace

VOLT_REGISTER_KERNEL(
    einsum, {.op = "Einsum", .since = 12, .types = kNumericTypes, .create = make_kernel<Einsum>});
VOLT_REGISTER_KERNEL(det,
                     {.op = "Det", .since = 11, .types = kFloatTypes, .create = make_kernel<Det>});
VOLT_REGISTER_KERNEL(det_grad, volt_kernel("DetGrad", make_kernel<DetGrad>));

}  // namespace volt
