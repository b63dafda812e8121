// Staging: the extra mappings that moving pages needs (migrator.h).
//
// A page's new physical page must be written before it is mapped at the page's address. It is
// written where it is already mapped (a host page's "home", or an idle device page's old
// mapping), else through a staging slot: one of kStagingPages addresses of a range reserved
// for this, mapped to the new page for the copy and unmapped after it.
//
// A mapping whose unmap fails is never mapped over: its address becomes a stray and
// release_strays() retries it (empty_cache, reset); a staging range with a stray inside is
// retired (a new one is reserved next time) and returned once nothing is mapped in it.
// Not thread-safe: the device allocator's lock guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/errors.h"
#include "core/pool_types.h"
#include "device/device.h"

namespace cudalloc {

class Staging {
 public:
  static constexpr std::size_t kStagingPages = 32;  // pages copied per host wait
  static constexpr std::size_t kHomeChunkPages = 512;

  Staging(device::Device& device, int ordinal, std::size_t page_size)
      : device_(device), ordinal_(ordinal), page_size_(page_size) {}

  // Maps `pages` (at most kStagingPages) at consecutive staging slots with access; *staged
  // counts the slots mapped, also on failure (unstage them).
  Error stage(const std::vector<PhysicalPage*>& pages, std::size_t* staged);
  void unstage(std::size_t staged);
  std::uintptr_t slot(std::size_t index) const { return staging_va_ + index * page_size_; }

  // A host page's home mapping; without one it is written through staging (slower, never
  // wrong).
  void map_home(PhysicalPage& phys);
  void unmap_home(PhysicalPage& phys);
  // A host chunk's home: a range of its own, the chunk mapped there whole with access; each
  // page's home is its slot in it. False (no home) on failure. unmap_chunk_home: a range whose
  // unmap fails stays reserved as a stray (release_strays retries it).
  bool map_chunk_home(PhysicalChunk& chunk);
  void unmap_chunk_home(PhysicalChunk& chunk);

  // Grants access to `count` pages mapped from `va` on: one call, else page by page.
  bool grant_range(std::uintptr_t va, std::size_t count);
  void release_strays();
  bool has_strays() const {
    return !stray_pages_.empty() || !stray_ranges_.empty() || !stray_homes_.empty();
  }
  // reset: retries the strays and forgets the rest; then drop() returns the ranges (after the
  // physical pages, whose home mappings lie in them, are gone).
  void forget_strays();
  void drop();

 private:
  device::Device& device_;
  const int ordinal_;
  const std::size_t page_size_;
  std::uintptr_t staging_va_ = 0;
  std::vector<std::uintptr_t> home_chunks_;
  std::vector<std::uintptr_t> free_homes_;
  std::vector<std::uintptr_t> stray_pages_;   // staging or home pages left mapped
  std::vector<std::uintptr_t> stray_ranges_;  // retired staging ranges (kStagingPages each)
  struct Range {
    std::uintptr_t va;
    std::size_t bytes;
  };
  std::vector<Range> stray_homes_;  // chunk homes left mapped: unmapped, then unreserved
};

}  // namespace cudalloc
