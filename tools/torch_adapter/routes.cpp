#include "routes.h"

#include <algorithm>

namespace cudalloc::torch_adapter {

std::uint64_t Routes::key_of(c10::MempoolId_t id) {
  if (id.first == 0 && id.second == 0) return 0;
  std::lock_guard lock(mutex_);
  auto [it, inserted] = keys_.emplace(id, next_key_);
  if (inserted) ids_.emplace(next_key_++, id);
  return it->second;
}

c10::MempoolId_t Routes::id_of(std::uint64_t key) const {
  std::lock_guard lock(mutex_);
  auto it = ids_.find(key);
  return it == ids_.end() ? c10::MempoolId_t{0, 0} : it->second;
}

void Routes::set_external(c10::MempoolId_t id, std::shared_ptr<cca::CUDAAllocator> allocator) {
  std::lock_guard lock(mutex_);
  externals_[id] = std::move(allocator);
}

std::shared_ptr<cca::CUDAAllocator> Routes::external_of(c10::MempoolId_t id) const {
  std::lock_guard lock(mutex_);
  auto it = externals_.find(id);
  return it == externals_.end() ? nullptr : it->second;
}

void Routes::begin(c10::DeviceIndex device, c10::MempoolId_t id, Filter filter) {
  std::lock_guard lock(mutex_);
  for (const Active& a : routes_) {
    TORCH_CHECK(!(a.device == device && a.id == id),
                "cudalloc: beginAllocateToPool: already allocating to pool (", id.first, ", ",
                id.second, ") on device ", static_cast<int>(device));
  }
  routes_.push_back(Active{device, id, std::move(filter)});
  active_.store(static_cast<int>(routes_.size()), std::memory_order_release);
}

bool Routes::end(c10::DeviceIndex device, c10::MempoolId_t id) {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(routes_.begin(), routes_.end(), [&](const Active& a) {
    return a.device == device && a.id == id;
  });
  if (it == routes_.end()) return false;
  routes_.erase(it);
  active_.store(static_cast<int>(routes_.size()), std::memory_order_release);
  return true;
}

Routes::Target Routes::route(c10::DeviceIndex device, cudaStream_t stream) const {
  if (!any_active()) return {};
  std::lock_guard lock(mutex_);
  for (auto it = routes_.rbegin(); it != routes_.rend(); ++it) {
    if (it->device != device || !it->filter(stream)) continue;
    Target t;
    t.id = it->id;
    auto k = keys_.find(it->id);
    t.key = k == keys_.end() ? 0 : k->second;
    auto e = externals_.find(it->id);
    if (e != externals_.end()) t.external = e->second;
    return t;
  }
  return {};
}

}  // namespace cudalloc::torch_adapter
