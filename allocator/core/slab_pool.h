// SlabPool: requests up to slab_max are rounded to a size class and served from a slab of that
// class owned by the requesting stream's pool. A slab is one block of the block pool, so an
// empty slab goes back to the block pool (and coalesces) once more than slab_keep empty slabs
// of its class are cached. Not thread-safe: the device allocator's lock guards it.
#pragma once

#include "core/block_pool.h"
#include "core/size_classes.h"

namespace cudalloc {

class SlabPool {
 public:
  SlabPool(const SizeClasses& classes, const Settings& settings, BlockPool& blocks,
           Ledger& ledger, StreamPools& pools)
      : classes_(classes), settings_(settings), blocks_(blocks), ledger_(ledger), pools_(pools) {}

  // An object of size's class from a slab of `pool` (new slabs follow `request`'s growth).
  Error allocate(StreamPool& pool, const Request& request, std::uintptr_t* addr, Slab** out);
  void free(Slab* slab, std::uintptr_t addr);
  // Returns every empty slab (of `only`, or of every pool) to the block pool (OOM path,
  // empty_cache, a destroyed stream).
  void release_empty(StreamPool* only = nullptr);

 private:
  Slab* new_slab(StreamPool& pool, const Request& request, int cls);
  void release(Slab* slab);

  const SizeClasses& classes_;
  const Settings& settings_;
  BlockPool& blocks_;
  Ledger& ledger_;
  StreamPools& pools_;
};

}  // namespace cudalloc
