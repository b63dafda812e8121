// Who holds memory, grouped top-down by stack frame like a flame graph's summary: the root is
// every allocation given; its children are the outermost frames (the program's entry), theirs
// the frames each called, down to the frame that allocated. Each node has the bytes and the
// count of the allocations beneath it. Where a frame both allocated and called frames that
// did, what it allocated itself is one more child, "(allocated in this frame)" (with the small
// callers, below, when it is as small as they are), so that the children add up to the node.
// A node at the depth bound shows no children.
//
// Frames are PyTorch's ("frames": [{filename, line, name}], innermost first, as
// _record_memory_history records them). Allocations without frames sit under one child,
// "(no stack recorded)"; bytes the caller cannot attribute (live before the trace began) under
// "(allocated before the trace began)".
//
// The JSON stays small whatever the input: at most FlameLimits::depth levels, and per node the
// largest `children` children that hold at least `min_share` of the root; the rest of a node's
// children are merged into one "(N smaller callers)" child.
// {"n": label, "b": bytes, "c": allocations, "k": [children, largest first]}
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace cudalloc::view {

struct FlameLimits {
  std::size_t depth = 32;
  std::size_t children = 12;
  double min_share = 0.002;
};

struct FlameInput {
  std::uint64_t bytes = 0;
  const nlohmann::json* frames = nullptr;  // may be null or empty: no stack
};

nlohmann::json flame_json(const std::vector<FlameInput>& allocations, std::uint64_t unattributed,
                          const FlameLimits& limits = {});

// "name (file:line)", with the file's directories left out.
std::string frame_label(const nlohmann::json& frame);

}  // namespace cudalloc::view
