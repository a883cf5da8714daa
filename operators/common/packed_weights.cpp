#include "operators/common/packed_weights.hpp"

namespace volt::dnnl_adapter {

namespace {
bool same_owner(const std::weak_ptr<void>& a, const std::shared_ptr<void>& b) {
  return !a.owner_before(b) && !b.owner_before(a);
}
}  // namespace

std::optional<Tensor> PackedWeightCache::find(const void* data, const std::shared_ptr<void>& owner,
                                              const dnnl::memory::desc& plain,
                                              const dnnl::memory::desc& packed) {
  if (!owner) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  auto [first, last] = entries_.equal_range(data);
  for (auto it = first; it != last; ++it) {
    const Entry& e = it->second;
    if (!same_owner(e.source, owner) || e.plain != plain || e.packed != packed) continue;
    std::shared_ptr<void> copy = e.copy.lock();
    if (!copy) continue;
    return Tensor::view(DType::UInt8, {e.bytes}, e.data, std::move(copy));
  }
  return std::nullopt;
}

void PackedWeightCache::remember(const void* data, const std::shared_ptr<void>& owner,
                                 const dnnl::memory::desc& plain, const dnnl::memory::desc& packed,
                                 const Tensor& copy) {
  if (!owner || !copy.owner()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();)
    it = it->second.source.expired() || it->second.copy.expired() ? entries_.erase(it) : ++it;
  entries_.emplace(data, Entry{owner, plain, packed, copy.owner(), const_cast<void*>(copy.raw()),
                               static_cast<int64_t>(copy.nbytes())});
}

PackedWeightCache& packed_weights() {
  static PackedWeightCache cache;
  return cache;
}

}  // namespace volt::dnnl_adapter
