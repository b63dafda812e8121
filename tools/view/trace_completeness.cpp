#include "view/trace_completeness.h"

#include <unordered_set>

#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;
using snapshot::EventKind;
using snapshot::SnapshotEvent;

// "1234567" -> "1,234,567"
std::string grouped(std::uint64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Events of `device`, and its free_completed events of addresses no alloc of the trace made
// live (an alloc, then a free, makes an address live and then not).
void count_events(const std::vector<SnapshotEvent>& events, int device, TraceCompleteness* c) {
  std::unordered_set<std::uint64_t> live;
  for (const SnapshotEvent& e : events) {
    if (e.device != device) continue;
    ++c->kept;
    if (e.kind == EventKind::alloc) live.insert(e.addr);
    if (e.kind == EventKind::free_completed && live.erase(e.addr) == 0) ++c->unseen_frees;
  }
}

}  // namespace

TraceCompleteness trace_completeness(const std::vector<SnapshotEvent>& events, int device,
                                     const json* device_info, std::uint64_t capacity) {
  TraceCompleteness c;
  c.capacity = capacity;
  count_events(events, device, &c);
  if (device_info != nullptr && device_info->contains("trace_dropped")) {
    c.dropped_known = true;
    c.dropped = u64(*device_info, "trace_dropped");
  }
  return c;
}

std::uint64_t trace_capacity(const json& doc) {
  auto section = doc.find("cudalloc");
  if (section == doc.end() || !section->is_object()) return 0;
  auto settings = section->find("settings");
  if (settings == section->end() || !settings->is_object()) return 0;
  auto trace = settings->find("trace");
  if (trace == settings->end()) return 0;
  if (trace->is_number_unsigned()) return trace->get<std::uint64_t>();
  if (!trace->is_string()) return 0;
  const std::string text = trace->get<std::string>();
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  return digits && text.size() < 19 ? std::stoull(text) : 0;
}

std::string trace_note(const TraceCompleteness& c) {
  if (c.complete()) return "";
  if (c.dropped > 0) {
    const std::string ring = c.capacity > 0 ? " (trace:" + std::to_string(c.capacity) + ")" : "";
    return "Incomplete trace: the ring buffer" + ring + " kept the last " + grouped(c.kept) +
           " events and dropped " + grouped(c.dropped) +
           " older ones, so the trace starts mid-run.";
  }
  std::string note = "Incomplete trace: it starts mid-run, with " + grouped(c.unseen_frees) +
                     (c.unseen_frees == 1 ? " free of a block" : " frees of blocks") +
                     " allocated before its first event.";
  if (!c.dropped_known) {
    note += " PyTorch keeps only the last max_entries events (_record_memory_history); how "
            "many it dropped is not recorded.";
  }
  return note;
}

json trace_completeness_json(const TraceCompleteness& c) {
  return {{"kept", c.kept},
          {"dropped", c.dropped_known ? json(c.dropped) : json(nullptr)},
          {"capacity", c.capacity},
          {"unseen_frees", c.unseen_frees},
          {"complete", c.complete()},
          {"note", trace_note(c)}};
}

}  // namespace cudalloc::view
