#include "core/region_tags.h"

#include <atomic>
#include <mutex>
#include <vector>

namespace cudalloc {
namespace {

struct Table {
  std::mutex mutex;
  std::vector<std::string> names;  // names[id - 1]
};

Table& table() {
  static Table* t = new Table;  // immortal: tags are read until the process exits
  return *t;
}

struct Stack {
  RegionId ids[RegionTags::kMaxDepth] = {};
  int depth = 0;
};

thread_local Stack stack;

// Regions entered and not yet left, over all threads. A thread that has entered one sees its
// own increment, so a zero read means the calling thread is in none: every allocation then
// skips the thread-local lookup (which in a shared library is a call to __tls_get_addr). A
// thread that exits inside a region leaves the count above zero: only the shortcut is lost.
std::atomic<std::int64_t> g_entered{0};

}  // namespace

Error RegionTags::intern(std::string_view tag, RegionId* id) {
  if (tag.empty() || tag.size() > kMaxTag) {
    return fail(Error::invalid_value, "region tag %s: a tag has 1 to %zu characters",
                tag.empty() ? "\"\"" : "too long", kMaxTag);
  }
  Table& t = table();
  std::lock_guard lock(t.mutex);
  for (std::size_t i = 0; i < t.names.size(); ++i) {
    if (t.names[i] == tag) {
      *id = static_cast<RegionId>(i + 1);
      return Error::ok;
    }
  }
  if (t.names.size() >= kMaxRegions) {
    return fail(Error::invalid_value, "region tag \"%.*s\": at most %zu distinct tags",
                static_cast<int>(tag.size()), tag.data(), kMaxRegions);
  }
  t.names.emplace_back(tag);
  *id = static_cast<RegionId>(t.names.size());
  return Error::ok;
}

RegionId RegionTags::find(std::string_view tag) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  for (std::size_t i = 0; i < t.names.size(); ++i) {
    if (t.names[i] == tag) return static_cast<RegionId>(i + 1);
  }
  return kNoRegion;
}

std::string RegionTags::name(RegionId id) {
  Table& t = table();
  std::lock_guard lock(t.mutex);
  return id == kNoRegion || id > t.names.size() ? std::string() : t.names[id - 1];
}

RegionId RegionTags::current() {
  if (g_entered.load(std::memory_order_relaxed) == 0) return kNoRegion;
  return stack.depth == 0 ? kNoRegion : stack.ids[stack.depth - 1];
}

Error RegionTags::begin(RegionId id) {
  if (stack.depth == kMaxDepth) {
    return fail(Error::invalid_value, "region_begin: regions nest at most %d deep on a thread",
                kMaxDepth);
  }
  stack.ids[stack.depth++] = id;
  g_entered.fetch_add(1, std::memory_order_relaxed);
  return Error::ok;
}

Error RegionTags::end() {
  if (stack.depth == 0) {
    return fail(Error::invalid_value, "region_end: no region was begun on this thread");
  }
  --stack.depth;
  g_entered.fetch_sub(1, std::memory_order_relaxed);
  return Error::ok;
}

}  // namespace cudalloc
