// LiveMap: the set of allocations currently handed out, keyed by pointer.
//
// Open addressing with linear probing and backward-shift deletion (no tombstones), so that a
// lookup touches one or two cache lines and the table never degrades under churn. Key 0 marks
// an empty slot; allocations never start at address 0, so find(0) (a NULL pointer) is never
// found rather than matching an empty slot. Not thread-safe: the owner locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/owner.h"

namespace cudalloc {

struct LiveEntry {
  std::uintptr_t key = 0;
  Owner owner;
  std::size_t requested = 0;  // the size the caller asked for
};

class LiveMap {
 public:
  LiveMap() { table_.resize(kInitialSlots); }

  std::size_t size() const { return size_; }

  // Inserts a new key (which must not be present).
  void insert(const LiveEntry& entry) {
    if ((size_ + 1) * 2 > table_.size()) grow();
    place(entry);
    ++size_;
  }

  // The entry for key, or nullptr; always nullptr for key 0.
  LiveEntry* find(std::uintptr_t key) {
    return const_cast<LiveEntry*>(static_cast<const LiveMap*>(this)->find(key));
  }
  const LiveEntry* find(std::uintptr_t key) const {
    if (key == 0) return nullptr;  // 0 is the empty-slot marker, never a live key
    for (std::size_t i = slot_of(key);; i = next(i)) {
      if (table_[i].key == key) return &table_[i];
      if (table_[i].key == 0) return nullptr;
    }
  }

  // Removes the entry `e` points to (from find).
  void erase(LiveEntry* e) {
    std::size_t hole = static_cast<std::size_t>(e - table_.data());
    // Shift later members of the probe run back so that no lookup meets a false empty slot.
    for (std::size_t i = next(hole);; i = next(i)) {
      if (table_[i].key == 0) break;
      const std::size_t home = slot_of(table_[i].key);
      // Move the entry if its home is not within (hole, i] cyclically.
      const bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
      if (!stays) {
        table_[hole] = table_[i];
        hole = i;
      }
    }
    table_[hole] = LiveEntry{};
    --size_;
  }

  template <typename F>
  void for_each(F&& f) const {
    for (const LiveEntry& e : table_) {
      if (e.key != 0) f(e);
    }
  }

 private:
  static constexpr std::size_t kInitialSlots = 1024;

  std::size_t slot_of(std::uintptr_t key) const {
    // Allocations are 256-byte aligned: drop the always-zero bits, then mix.
    return static_cast<std::size_t>(((key >> 8) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  std::size_t next(std::size_t i) const { return (i + 1) & (table_.size() - 1); }

  void place(const LiveEntry& entry) {
    std::size_t i = slot_of(entry.key);
    while (table_[i].key != 0) i = next(i);
    table_[i] = entry;
  }

  void grow() {
    std::vector<LiveEntry> old(table_.size() * 2);
    old.swap(table_);
    --shift_;
    for (const LiveEntry& e : old) {
      if (e.key != 0) place(e);
    }
  }

  std::vector<LiveEntry> table_;
  int shift_ = 64 - 10;  // log2(kInitialSlots) = 10
  std::size_t size_ = 0;
};

}  // namespace cudalloc
