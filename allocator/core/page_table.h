// PageTable: the page records of one paged segment, one per granule of its range.
//
// A segment's range is sized for the whole device (page_mapper.cpp), so its table has one
// record per granule of device memory: 70,000 on a 141 GB device, half a million for the
// replay's default simulated terabyte. Records start all zero (no physical page, no users,
// no segment) and the table's memory comes from the host's lazy zero pages, so a record costs
// host memory only once it is written: creating a segment is O(1), and only pages that are
// used are ever touched. Loops over every record are for rare paths (empty_cache, validate,
// snapshots); the segment's count of mapped pages lets them stop early.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <new>
#include <utility>

namespace cudalloc {

template <typename Record>
class PageTable {
 public:
  PageTable() = default;
  ~PageTable() { release(); }
  PageTable(const PageTable&) = delete;
  PageTable& operator=(const PageTable&) = delete;

  // Makes `n` zero records, once; throws std::bad_alloc when the host has no room (as every
  // metadata allocation of the core does: errors.h).
  void resize(std::size_t n) {
    release();
    if (n == 0) return;
    const std::size_t bytes = n * sizeof(Record);
    void* p = nullptr;
    if (bytes >= kMapThreshold) {
      // Fresh anonymous memory reads as zero and takes host memory only where written.
      p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) p = nullptr;
    } else {
      p = std::calloc(n, sizeof(Record));
    }
    if (p == nullptr) throw std::bad_alloc();
    // Record is an aggregate whose zero bytes are its default value: an implicit-lifetime
    // type, so zeroed memory holds valid records.
    records_ = static_cast<Record*>(p);
    size_ = n;
  }

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  Record& operator[](std::size_t i) { return records_[i]; }
  const Record& operator[](std::size_t i) const { return records_[i]; }
  Record* data() { return records_; }
  const Record* data() const { return records_; }
  Record* begin() { return records_; }
  Record* end() { return records_ + size_; }
  const Record* begin() const { return records_; }
  const Record* end() const { return records_ + size_; }

 private:
  static constexpr std::size_t kMapThreshold = std::size_t{1} << 20;

  void release() {
    if (records_ == nullptr) return;
    const std::size_t bytes = size_ * sizeof(Record);
    if (bytes >= kMapThreshold) {
      ::munmap(records_, bytes);
    } else {
      std::free(records_);
    }
    records_ = nullptr;
    size_ = 0;
  }

  Record* records_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cudalloc
