#include "operators/common/reduction.hpp"

#include "operators/common/shape_util.hpp"

namespace volt {

ReducePlan plan_reduce(const Shape& in, std::vector<int64_t> axes, bool keepdims, bool noop_empty,
                       const Node& node) {
  ReducePlan p;
  const int64_t rank = static_cast<int64_t>(in.size());
  p.reduced.assign(in.size(), axes.empty() ? 1 : 0);
  if (axes.empty() && noop_empty) {
    p.identity = true;
    p.out = in;
    return p;
  }
  for (int64_t a : axes) p.reduced[normalize_axis(a, rank, node)] = 1;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!p.reduced[i])
      p.out.push_back(in[i]);
    else if (keepdims)
      p.out.push_back(1);
  }
  return p;
}

}  // namespace volt
