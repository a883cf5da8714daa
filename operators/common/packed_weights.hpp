// Weights packed into a primitive's layout, shared by every plan (and session) that packs the same
// constant into the same layout: a model fed a new input shape builds a new plan, and its
// convolutions' and matmuls' weights do not depend on that shape, so they are reordered once.
// Entries are held weakly on both sides: one lasts while its source buffer and its packed copy
// do (some plan holds the copy), so the cache keeps no memory alive, and a source buffer freed
// and reused is never taken for the old one. dnnl_adapter::pack_constant is its one user.
#pragma once
#include <dnnl.hpp>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "volt/volt.hpp"

namespace volt::dnnl_adapter {

class PackedWeightCache {
 public:
  // The copy of the constant at `data` (laid out as `plain`, in a buffer `owner` keeps alive) in
  // layout `packed`, if a live one exists.
  std::optional<Tensor> find(const void* data, const std::shared_ptr<void>& owner,
                             const dnnl::memory::desc& plain, const dnnl::memory::desc& packed);
  // Records `copy` as that constant in layout `packed` (nothing when either has no owner).
  void remember(const void* data, const std::shared_ptr<void>& owner,
                const dnnl::memory::desc& plain, const dnnl::memory::desc& packed,
                const Tensor& copy);

  // How many weights were reordered into a packed layout so far (for tests and profiles).
  void count_pack() { packs_.fetch_add(1, std::memory_order_relaxed); }
  size_t packs() const { return packs_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::weak_ptr<void> source;
    dnnl::memory::desc plain, packed;
    std::weak_ptr<void> copy;
    void* data;
    int64_t bytes;
  };
  std::mutex mutex_;
  std::unordered_multimap<const void*, Entry> entries_;  // by the source's data pointer
  std::atomic<size_t> packs_{0};
};

PackedWeightCache& packed_weights();  // the process's

}  // namespace volt::dnnl_adapter
