#include "view/flame.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "view/snapshot_fields.h"

namespace cudalloc::view {
namespace {

using nlohmann::json;

struct Node {
  std::uint64_t bytes = 0, count = 0;
  std::uint64_t own_bytes = 0, own_count = 0;  // allocations whose stack ends here
  std::map<std::string, std::unique_ptr<Node>> children;

  Node& child(const std::string& label) {
    auto& slot = children[label];
    if (!slot) slot = std::make_unique<Node>();
    return *slot;
  }
  void add(std::uint64_t b, std::uint64_t n) {
    bytes += b;
    count += n;
  }
};

// The labels of one stack, outermost first, computed once per distinct frames list.
class Labels {
 public:
  const std::vector<std::string>& of(const json& frames) {
    auto [it, added] = cache_.try_emplace(&frames);
    if (added) {
      for (auto f = frames.rbegin(); f != frames.rend(); ++f) {
        if (f->is_object()) it->second.push_back(frame_label(*f));
      }
    }
    return it->second;
  }

 private:
  std::unordered_map<const json*, std::vector<std::string>> cache_;
};

json emit(const std::string& label, const Node& node, std::uint64_t total, std::size_t depth,
          const FlameLimits& limits) {
  json out = {{"n", label}, {"b", node.bytes}, {"c", node.count}, {"k", json::array()}};
  if (depth >= limits.depth) return out;
  std::vector<std::pair<const std::string*, const Node*>> order;
  for (const auto& [name, child] : node.children) order.emplace_back(&name, child.get());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second->bytes > b.second->bytes; });
  // What the frame allocated itself, beside its callees: a leaf among them, so that the
  // children add up to the frame (merged with the small callers when as small as they are).
  Node own;
  own.add(node.own_bytes, node.own_count);
  const std::string own_label = "(allocated in this frame)";
  if (!order.empty() && own.bytes > 0) {
    const auto at = std::find_if(order.begin(), order.end(),
                                 [&](const auto& c) { return c.second->bytes < own.bytes; });
    order.insert(at, {&own_label, &own});
  }
  Node rest;
  std::size_t merged = 0;
  for (const auto& [name, child] : order) {
    if (child == &own) {
      if (double(own.bytes) >= limits.min_share * double(total)) {
        out["k"].push_back(emit(*name, own, total, limits.depth, limits));
      } else {  // too small for a row: with the small callers, so that the rows add up
        rest.add(own.bytes, own.count);
        ++merged;
      }
      continue;
    }
    const bool kept = out["k"].size() < limits.children &&
                      double(child->bytes) >= limits.min_share * double(total);
    if (kept) {
      out["k"].push_back(emit(*name, *child, total, depth + 1, limits));
    } else {
      rest.add(child->bytes, child->count);
      ++merged;
    }
  }
  if (merged > 0) {
    // Appended, not "(" + string: GCC 12 at -O3 reports a false -Wrestrict for the latter.
    std::string what = "(";
    what += merged == 1 ? "1 smaller caller)" : std::to_string(merged) + " smaller callers)";
    out["k"].push_back(emit(what, rest, total, limits.depth, limits));
  }
  return out;
}

}  // namespace

std::string frame_label(const json& frame) {
  std::string file = frame_text(frame, "filename");
  if (const auto slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
  return frame_text(frame, "name") + " (" + file + ":" + std::to_string(frame_line(frame)) + ")";
}

json flame_json(const std::vector<FlameInput>& allocations, std::uint64_t unattributed,
                const FlameLimits& limits) {
  Node root;
  Labels labels;
  for (const FlameInput& a : allocations) {
    root.add(a.bytes, 1);
    // A list of frames none of which is an object ([null]) is no stack either.
    const bool has_stack = a.frames != nullptr && a.frames->is_array() &&
                           !labels.of(*a.frames).empty();
    if (!has_stack) {
      root.child("(no stack recorded)").add(a.bytes, 1);
      continue;
    }
    Node* node = &root;
    std::size_t depth = 0;
    bool cut = false;
    for (const std::string& label : labels.of(*a.frames)) {
      if (++depth > limits.depth) {
        cut = true;  // deeper frames left out: not the frame's own allocation
        break;
      }
      node = &node->child(label);
      node->add(a.bytes, 1);
    }
    if (!cut) {
      node->own_bytes += a.bytes;
      ++node->own_count;
    }
  }
  if (unattributed > 0) {
    root.bytes += unattributed;
    root.child("(allocated before the trace began)").bytes += unattributed;
  }
  return emit("all", root, root.bytes, 0, limits);
}

}  // namespace cudalloc::view
