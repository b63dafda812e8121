#include "view/segment_map.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;

struct Block {
  std::uint64_t offset, size, requested;
  int state;
  std::uint64_t count;  // blocks merged into this run
  int site = -1;        // index into Sites, -1: no stack recorded (or a merged run)
};

// One string per distinct allocation site (allocation_site()), indexed by the blocks.
class Sites {
 public:
  int of(const json& block) {
    const std::string text = allocation_site(block);
    if (text.empty()) return -1;
    auto [it, inserted] = index_.emplace(text, static_cast<int>(texts_.size()));
    if (inserted) texts_.push_back(text);
    return it->second;
  }
  json to_json() const { return texts_; }

 private:
  std::map<std::string, int> index_;
  std::vector<std::string> texts_;
};

std::vector<Block> segment_blocks(const json& seg, const SlabRanges& slabs, Sites& sites) {
  std::vector<Block> out;
  const std::uint64_t base = u64(seg, "address");
  auto blocks = seg.find("blocks");
  if (blocks == seg.end() || !blocks->is_array()) return out;
  for (const json& b : *blocks) {
    if (!b.is_object()) continue;
    const std::uint64_t addr = u64(b, "address");
    out.push_back({addr >= base ? addr - base : 0, u64(b, "size"), u64(b, "requested_size"),
                   block_state_code(b.value("state", ""), addr, slabs), 1, sites.of(b)});
  }
  return out;
}

// Neighbouring blocks of one state become one run; the run's requested bytes add up.
std::vector<Block> merge_runs(const std::vector<Block>& blocks) {
  std::vector<Block> out;
  for (const Block& b : blocks) {
    if (!out.empty() && out.back().state == b.state &&
        out.back().offset + out.back().size == b.offset) {
      out.back().size += b.size;
      out.back().requested += b.requested;
      out.back().count += b.count;
      if (out.back().site != b.site) out.back().site = -1;
    } else {
      out.push_back(b);
    }
  }
  return out;
}

json pages_json(const json& seg) {
  json out = json::array();
  auto pages = seg.find("pages");
  if (pages == seg.end() || !pages->is_array()) return out;
  const std::uint64_t base = u64(seg, "address");
  for (const json& p : *pages) {
    if (!p.is_object()) continue;
    const std::uint64_t addr = u64(p, "address");
    const bool mapped = p.contains("mapped") ? p.value("mapped", false)
                                             : p.value("state", std::string("mapped")) == "mapped";
    const auto location = p.find("location");
    const bool host = mapped && location != p.end() && *location == "host";
    out.push_back({addr >= base ? addr - base : 0, u64(p, "size"), mapped ? (host ? 2 : 1) : 0});
  }
  return out;
}

json segment_json(const json& seg, const std::vector<Block>& blocks) {
  json rows = json::array();
  for (const Block& b : blocks) {
    rows.push_back({b.offset, b.size, b.state, b.requested, b.count, b.site});
  }
  auto text = [&](const char* key, const char* fallback) {
    auto it = seg.find(key);
    return it != seg.end() && it->is_string() ? it->get<std::string>() : std::string(fallback);
  };
  auto expandable = seg.find("is_expandable");
  return {{"address", hex_address(u64(seg, "address"))},
          {"size", u64(seg, "total_size")},
          {"stream", hex_address(u64(seg, "stream"))},
          {"type", text("segment_type", "")},
          {"expandable",
           expandable != seg.end() && expandable->is_boolean() && expandable->get<bool>()},
          {"location", segment_location(seg)},
          {"host_bytes", segment_host_bytes(seg)},
          {"pages", pages_json(seg)},
          {"region", text("region", "")},
          {"paused", text("region_state", "") == "paused"},
          {"blocks", std::move(rows)}};
}

std::size_t count_blocks(const std::vector<std::vector<Block>>& per_segment) {
  std::size_t n = 0;
  for (const auto& blocks : per_segment) n += blocks.size();
  return n;
}

}  // namespace

std::string allocation_site(const json& block, std::size_t max_frames) {
  auto frames = block.find("frames");
  return frames == block.end() ? "" : frames_site(*frames, max_frames);
}

std::string frames_site(const json& frames, std::size_t max_frames) {
  if (!frames.is_array()) return "";
  std::string text;
  std::size_t kept = 0;
  for (const json& f : frames) {
    if (kept == max_frames) break;
    if (!f.is_object()) continue;
    const std::string file = frame_text(f, "filename");
    // PyTorch's own frames (torch/...) say less than the caller's: skipped before the first
    // frame of user code.
    if (kept == 0 && file.find("/torch/") != std::string::npos) continue;
    if (!text.empty()) text += "\n";
    text += frame_text(f, "name") + " (" + file + ":" + std::to_string(frame_line(f)) + ")";
    ++kept;
  }
  return text;
}

std::string hex_address(std::uint64_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

int block_state_code(const std::string& state, std::uint64_t address, const SlabRanges& slabs) {
  if (state == "active_pending_free") return kPending;
  if (state != "active_allocated") return kFree;
  auto it = std::upper_bound(slabs.begin(), slabs.end(), std::pair{address, UINT64_MAX});
  const bool in_slab = it != slabs.begin() && address < std::prev(it)->second;
  return in_slab ? kSlab : kAllocated;
}

json segment_map_json(const std::vector<const json*>& segments, const SlabRanges& slabs,
                      std::size_t max_blocks) {
  std::vector<std::vector<Block>> blocks;
  Sites sites;
  for (const json* seg : segments) blocks.push_back(segment_blocks(*seg, slabs, sites));
  const std::size_t total = count_blocks(blocks);
  if (total > max_blocks) {
    for (auto& b : blocks) b = merge_runs(b);
  }
  // Past the budget even merged, the largest segments are kept.
  std::vector<std::size_t> order(segments.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return u64(*segments[a], "total_size") > u64(*segments[b], "total_size");
  });
  std::vector<bool> kept(segments.size(), false);
  std::size_t drawn = 0, left_out = 0;
  for (std::size_t i : order) {
    if (drawn > 0 && drawn + blocks[i].size() > max_blocks) {
      ++left_out;
      continue;
    }
    kept[i] = true;
    drawn += blocks[i].size();
  }
  json out = json::array();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    if (kept[i]) out.push_back(segment_json(*segments[i], blocks[i]));
  }
  return {{"segments", std::move(out)},
          {"blocks_total", total},
          {"blocks_drawn", drawn},
          {"sites", sites.to_json()},
          {"segments_left_out", left_out}};
}

}  // namespace cudalloc::view
