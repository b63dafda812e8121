// The segments of one device as the viewer draws them: each block with its state, in a form
// small enough to embed in a page however many blocks the snapshot has.
//
// Block states (the numbers the page's script reads):
//   0 allocated, 1 pending free (freed, waiting for stream events), 2 free (cached),
//   3 slab object (allocated inside one of cudalloc's slabs)
// Optional segment fields, drawn when present: "is_expandable", "location" ("host" for a
// host-memory tier), "pages" ([{address, size, mapped}] of a virtual-memory segment),
// "region" and "region_state" (a sleep-and-wake region's tag; "paused" is coloured apart).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

namespace cudalloc::view {

enum BlockStateCode : int { kAllocated = 0, kPending = 1, kFree = 2, kSlab = 3 };

// [begin, end) address ranges of slabs, sorted by begin.
using SlabRanges = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

// `segments`: the snapshot's segment objects of one device. At most about `max_blocks` blocks
// are emitted: past that, neighbouring blocks of one state are merged into one run (with a
// count), and past that again the smallest segments are left out (counted in the result's
// "segments_left_out"). Returns {"segments": [...], "blocks_total", "blocks_drawn",
// "segments_left_out"}; each segment is {address, size, stream, type, expandable, location,
// pages: [[offset, size, 0 unmapped | 1 mapped | 2 mapped, host-located]], blocks: [[offset, size, state, requested, count]]}.
// Where a block was allocated: the first `max_frames` frames of its stack (the "frames" a
// PyTorch snapshot has when _record_memory_history recorded them), past PyTorch's own, one
// "name (file:line)" per line; "" without a stack.
std::string allocation_site(const nlohmann::json& block, std::size_t max_frames = 4);
// The same, from a "frames" list itself (a trace event's stack).
std::string frames_site(const nlohmann::json& frames, std::size_t max_frames = 4);

nlohmann::json segment_map_json(const std::vector<const nlohmann::json*>& segments,
                                const SlabRanges& slabs, std::size_t max_blocks);

// A block's state code from the schema's state name and the slabs around it.
int block_state_code(const std::string& state, std::uint64_t address, const SlabRanges& slabs);

// "0x7f0000000000"; JavaScript numbers cannot hold every 64-bit address.
std::string hex_address(std::uint64_t address);

}  // namespace cudalloc::view
