#include "operators/common/packed_weights.hpp"

namespace volt::dnnl_adapter {

namespace {
bool same_owner(const std::weak_ptr<void>& a, const std::shared_ptr<void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
}  // namespace

std::optional<Tensor> PackedWeightCache::find(const Tensor& source, const dnnl::memory::desc& plain,
                                              const dnnl::memory::desc& packed) {
  if (!source.owner()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  auto [first, last] = entries_.equal_range(source.raw());
  for (auto it = first; it != last; ++it) {
    const Entry& e = it->second;
    if (!same_owner(e.source, source.owner()) || e.plain != plain || e.packed != packed) continue;
    std::shared_ptr<void> owner = e.copy.lock();
    if (!owner) continue;
    return Tensor::view(DType::UInt8, {e.bytes}, e.data, std::move(owner));
  }
  return std::nullopt;
}

void PackedWeightCache::remember(const Tensor& source, const dnnl::memory::desc& plain,
                                 const dnnl::memory::desc& packed, const Tensor& copy) {
  if (!source.owner() || !copy.owner()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.source.expired() || it->second.copy.expired() ? entries_.erase(it) : ++it;
  entries_.emplace(source.raw(),
                   Entry{source.owner(), plain, packed, copy.owner(), const_cast<void*>(copy.raw()),
                         static_cast<int64_t>(copy.nbytes())});
}

PackedWeightCache& packed_weights() {
  static PackedWeightCache cache;
  return cache;
}

}  // namespace volt::dnnl_adapter
