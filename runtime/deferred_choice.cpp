#include "runtime/deferred_choice.hpp"

namespace volt {

std::shared_ptr<const DeferredChoice> DeferredChoices::find(
    std::span<const TypeShape> types, std::span<const Value* const> values) const {
  std::shared_ptr<const Entry> e;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    e = last_;
  }
  if (!e || e->types.size() != types.size()) return nullptr;
  for (size_t i = 0; i < types.size(); ++i) {
    if (!same_type(e->types[i], types[i])) return nullptr;
    // (A constant of the plan is the same Value at every run of it.)
    if (e->read_constants[i] && e->read_constants[i] != values[i]) return nullptr;
  }
  return std::shared_ptr<const DeferredChoice>(e, &e->choice);
}

std::shared_ptr<const DeferredChoice> DeferredChoices::remember(
    std::span<const TypeShape> types, std::span<const Value* const> values, uint64_t read,
    DeferredChoice choice) {
  if (types.size() > 64 || values.size() != types.size())
    return std::make_shared<const DeferredChoice>(std::move(choice));
  // (One allocation: the choice lives in its entry, and what runs it holds the entry.)
  auto e = std::make_shared<Entry>();
  e->read_constants.assign(types.size(), nullptr);
  for (size_t i = 0; i < types.size(); ++i)
    if (read >> i & 1) e->read_constants[i] = values[i];
  e->types.assign(types.begin(), types.end());
  e->choice = std::move(choice);
  std::shared_ptr<const DeferredChoice> kept(e, &e->choice);
  std::lock_guard<std::mutex> lock(mutex_);
  last_ = std::move(e);
  return kept;
}

}  // namespace volt
