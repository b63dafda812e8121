#include "core/staging.h"

#include "core/log.h"

namespace cudalloc {

Error Staging::stage(const std::vector<PhysicalPage*>& pages, std::size_t* staged) {
  *staged = 0;
  if (staging_va_ == 0) {
    const auto status = device_.reserve(ordinal_, kStagingPages * page_size_, &staging_va_);
    if (status != device::Status::ok) {
      staging_va_ = 0;
      return fail(Error::device_error, "device %d: reserving staging addresses failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
  }
  for (; *staged < pages.size(); ++*staged) {
    const auto status = device_.map(slot(*staged), page_size_, pages[*staged]->handle, 0);
    if (status != device::Status::ok) {
      return fail(Error::device_error, "device %d: mapping a staging page failed: %s %s",
                  ordinal_, device::status_name(status), device_.last_failure());
    }
  }
  if (!grant_range(staging_va_, pages.size())) {
    return fail(Error::device_error, "device %d: granting access to staging pages failed: %s",
                ordinal_, device_.last_failure());
  }
  return Error::ok;
}

void Staging::unstage(std::size_t staged) {
  bool stuck = false;
  for (std::size_t k = 0; k < staged; ++k) {
    if (device_.unmap(slot(k), page_size_) != device::Status::ok) {
      log().warn("device {}: unmapping a staging page failed: {}", ordinal_,
                 device_.last_failure());
      stray_pages_.push_back(slot(k));
      stuck = true;
    }
  }
  // A slot that stays mapped cannot be mapped over: retire the range (a new one is reserved
  // next time); release_strays() retries the unmaps and then returns the range.
  if (stuck) {
    stray_ranges_.push_back(staging_va_);
    staging_va_ = 0;
  }
}

void Staging::map_home(PhysicalPage& phys) {
  if (free_homes_.empty()) {
    std::uintptr_t chunk = 0;
    if (device_.reserve(ordinal_, kHomeChunkPages * page_size_, &chunk) != device::Status::ok) {
      return;
    }
    home_chunks_.push_back(chunk);
    for (std::size_t i = kHomeChunkPages; i-- > 0;) free_homes_.push_back(chunk + i * page_size_);
  }
  const std::uintptr_t va = free_homes_.back();
  if (device_.map(va, page_size_, phys.handle, 0) != device::Status::ok) return;
  if (device_.set_access(ordinal_, va, page_size_) != device::Status::ok) {
    if (device_.unmap(va, page_size_) != device::Status::ok) {
      free_homes_.pop_back();
      stray_pages_.push_back(va);
    }
    return;
  }
  free_homes_.pop_back();
  phys.home = va;
}

void Staging::unmap_home(PhysicalPage& phys) {
  if (phys.home == 0) return;
  // A slot that cannot be unmapped is not used again (release_strays retries it).
  if (device_.unmap(phys.home, page_size_) == device::Status::ok) {
    free_homes_.push_back(phys.home);
  } else {
    stray_pages_.push_back(phys.home);
  }
  phys.home = 0;
}

bool Staging::map_chunk_home(PhysicalChunk& chunk) {
  const std::size_t bytes = chunk.count() * page_size_;
  std::uintptr_t va = 0;
  if (device_.reserve(ordinal_, bytes, &va) != device::Status::ok) return false;
  if (device_.map(va, bytes, chunk.handle, 0) != device::Status::ok) {
    device_.unreserve(va, bytes);
    return false;
  }
  chunk.home = va;
  if (device_.set_access(ordinal_, va, bytes) != device::Status::ok) {
    unmap_chunk_home(chunk);
    return false;
  }
  for (PhysicalPage* phys : chunk.pages) phys->home = va + phys->slot * page_size_;
  return true;
}

void Staging::unmap_chunk_home(PhysicalChunk& chunk) {
  if (chunk.home == 0) return;
  const Range home{chunk.home, chunk.count() * page_size_};
  chunk.home = 0;
  for (PhysicalPage* phys : chunk.pages) phys->home = 0;
  if (device_.unmap(home.va, home.bytes) != device::Status::ok) {
    log().warn("device {}: unmapping a host chunk's home failed: {}", ordinal_,
               device_.last_failure());
    stray_homes_.push_back(home);
    return;
  }
  device_.unreserve(home.va, home.bytes);
}

bool Staging::grant_range(std::uintptr_t va, std::size_t count) {
  if (device_.set_access(ordinal_, va, count * page_size_) == device::Status::ok) return true;
  log().debug("device {}: granting access to {} pages in one call failed ({}); page by page",
              ordinal_, count, device_.last_failure());
  for (std::size_t k = 0; k < count; ++k) {
    if (device_.set_access(ordinal_, va + k * page_size_, page_size_) != device::Status::ok) {
      return false;
    }
  }
  return true;
}

void Staging::release_strays() {
  std::erase_if(stray_homes_, [&](const Range& home) {
    if (device_.unmap(home.va, home.bytes) != device::Status::ok) return false;
    device_.unreserve(home.va, home.bytes);
    return true;
  });
  std::erase_if(stray_pages_, [&](std::uintptr_t va) {
    return device_.unmap(va, page_size_) == device::Status::ok;
  });
  std::erase_if(stray_ranges_, [&](std::uintptr_t range) {
    const std::uintptr_t end = range + kStagingPages * page_size_;
    for (std::uintptr_t va : stray_pages_) {
      if (va >= range && va < end) return false;  // still mapped inside
    }
    return device_.unreserve(range, kStagingPages * page_size_) == device::Status::ok;
  });
}

void Staging::forget_strays() {
  release_strays();
  stray_pages_.clear();
  stray_ranges_.clear();
  stray_homes_.clear();
}

void Staging::drop() {
  for (std::uintptr_t chunk : home_chunks_) device_.unreserve(chunk, kHomeChunkPages * page_size_);
  home_chunks_.clear();
  free_homes_.clear();
  if (staging_va_ != 0) device_.unreserve(staging_va_, page_size_ * kStagingPages);
  staging_va_ = 0;
}

}  // namespace cudalloc
