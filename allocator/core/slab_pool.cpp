#include "core/slab_pool.h"

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

Error SlabPool::allocate(StreamPool& pool, const Request& request, std::uintptr_t* addr,
                         Slab** out) {
  const int cls = classes_.class_of(request.size);
  SlabClass& c = pool.classes[static_cast<std::size_t>(cls)];
  if (c.available.empty() && new_slab(pool, request, cls) == nullptr) return Error::out_of_memory;
  Slab* slab = c.available.back();
  const std::uint32_t slot = slab->free_slots.back();
  slab->free_slots.pop_back();
  if (slab->used++ == 0) --c.empty;
  if (slab->free_slots.empty()) make_unavailable(c, slab);
  *addr = slab->base() + std::uintptr_t{slot} * slab->object_size;
  *out = slab;
  return Error::ok;
}

Slab* SlabPool::new_slab(StreamPool& pool, const Request& request, int cls) {
  Block* block = nullptr;
  Request slab_request = request;
  slab_request.size = classes_.slab_bytes(cls);
  if (blocks_.allocate(pool, slab_request, BlockUse::slab, &block) != Error::ok) return nullptr;
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
  ledger_.slab_created(block->size);
  return slab;
}

void SlabPool::free(Slab* slab, std::uintptr_t addr) {
  SlabClass& c = slab->pool->classes[static_cast<std::size_t>(slab->cls)];
  // A slab is at most a few MiB (size_classes.h: a few objects of at most slab_max, 1 MiB, in
  // 64 KiB or 2 MiB units), far below 4 GiB: a 32-bit division, cheaper than a 64-bit one.
  const auto slot = static_cast<std::uint32_t>(addr - slab->base()) / slab->object_size;
  slab->free_slots.push_back(slot);
  if (slab->available_index < 0) make_available(c, slab);
  if (--slab->used == 0 && ++c.empty > settings_.slab_keep) release(slab);
}

void SlabPool::release(Slab* slab) {
  SlabClass& c = slab->pool->classes[static_cast<std::size_t>(slab->cls)];
  make_unavailable(c, slab);
  --c.empty;
  Block* block = slab->block;
  ledger_.slab_released(block->size);
  delete slab;
  block->slab = nullptr;
  blocks_.free(block);
}

void SlabPool::release_empty(StreamPool* only) {
  pools_.for_each([&](StreamPool& pool) {
    if (only != nullptr && &pool != only) return;
    for (SlabClass& c : pool.classes) {
      // Iterate over a copy: release reorders c.available.
      const std::vector<Slab*> slabs = c.available;
      for (Slab* slab : slabs) {
        if (slab->used == 0) release(slab);
      }
    }
  });
}

}  // namespace cudalloc
