// Slabs: requests up to slab_max are rounded to a size class and served from a slab of that
// class owned by the requesting stream's pool. A slab is one block of the block pool, so an
// empty slab goes back to the block pool (and coalesces) once more than slab_keep empty slabs
// of its class are cached.
#include "core/device_allocator.h"

namespace cudalloc {
namespace {

void make_available(SlabClass& c, Slab* slab) {
  slab->available_index = static_cast<std::int32_t>(c.available.size());
  c.available.push_back(slab);
}

void make_unavailable(SlabClass& c, Slab* slab) {
  const auto i = static_cast<std::size_t>(slab->available_index);
  Slab* moved = c.available.back();
  c.available[i] = moved;
  moved->available_index = static_cast<std::int32_t>(i);
  c.available.pop_back();
  slab->available_index = -1;
}

}  // namespace

Error DeviceAllocator::allocate_small(StreamPool& pool, std::size_t size, std::uintptr_t* addr,
                                      Slab** out) {
  const int cls = classes_.class_of(size);
  SlabClass& c = pool.classes[static_cast<std::size_t>(cls)];
  if (c.available.empty()) {
    Slab* fresh = new_slab(pool, cls);
    if (fresh == nullptr) return Error::out_of_memory;
  }
  Slab* slab = c.available.back();
  const std::uint32_t slot = slab->free_slots.back();
  slab->free_slots.pop_back();
  if (slab->used++ == 0) --c.empty;
  if (slab->free_slots.empty()) make_unavailable(c, slab);
  *addr = slab->base() + std::uintptr_t{slot} * slab->object_size;
  *out = slab;
  return Error::ok;
}

Slab* DeviceAllocator::new_slab(StreamPool& pool, int cls) {
  Block* block = nullptr;
  if (allocate_large(pool, classes_.slab_bytes(cls), true, &block) != Error::ok) return nullptr;
  auto* slab = new Slab;
  slab->block = block;
  slab->pool = &pool;
  slab->cls = cls;
  slab->object_size = static_cast<std::uint32_t>(classes_.size_of(cls));
  slab->capacity = static_cast<std::uint32_t>(block->size / slab->object_size);
  slab->free_slots.reserve(slab->capacity);
  // Highest slot first in the vector, so that slot 0 is handed out first.
  for (std::uint32_t i = slab->capacity; i > 0; --i) slab->free_slots.push_back(i - 1);
  block->state = Block::State::slab;
  block->slab = slab;
  SlabClass& c = pool.classes[static_cast<std::size_t>(cls)];
  make_available(c, slab);
  ++c.empty;
  stats_.slab_bytes.increase(static_cast<std::int64_t>(block->size));
  stats_.slab_count.count();
  return slab;
}

void DeviceAllocator::free_small(Slab* slab, std::uintptr_t addr) {
  SlabClass& c = slab->pool->classes[static_cast<std::size_t>(slab->cls)];
  const auto slot = static_cast<std::uint32_t>((addr - slab->base()) / slab->object_size);
  slab->free_slots.push_back(slot);
  if (slab->available_index < 0) make_available(c, slab);
  if (--slab->used == 0 && ++c.empty > settings_.slab_keep) release_slab(slab);
}

void DeviceAllocator::release_slab(Slab* slab) {
  SlabClass& c = slab->pool->classes[static_cast<std::size_t>(slab->cls)];
  make_unavailable(c, slab);
  --c.empty;
  Block* block = slab->block;
  stats_.slab_bytes.decrease(static_cast<std::int64_t>(block->size));
  stats_.slab_count.decrease(1);
  delete slab;
  block->slab = nullptr;
  free_block(block);
}

void DeviceAllocator::release_empty_slabs() {
  for (auto& [stream, pool] : pools_) {
    for (SlabClass& c : pool->classes) {
      // Iterate over a copy: release_slab reorders c.available.
      const std::vector<Slab*> slabs = c.available;
      for (Slab* slab : slabs) {
        if (slab->used == 0) release_slab(slab);
      }
    }
  }
}

}  // namespace cudalloc
