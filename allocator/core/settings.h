// Settings: the policy knobs of the allocator. Filled from CUDALLOC_CONF by the options table
// (api/options.cpp), which also documents every field; defaults live here only.
#pragma once

#include <cstddef>
#include <string>

#include "util/units.h"

namespace cudalloc {

// Where a request goes when the device budget (limit, fraction, or the device itself) has no
// room for it after the cache is reclaimed: nowhere (out of memory), or host memory.
enum class Offload { none, host };

// Whether every stream of the program is seen being created (the interposer watches stream
// creation in the runtime it can interpose). Device-ordered frees depend on it: where some
// stream may be unseen (a statically linked runtime creates streams out of sight), only a
// synchronization of the whole device proves the work queued before a free done.
enum class StreamVisibility { unseen_possible, all_seen };

struct Settings {
  // Cap on reserved device memory per device, in bytes; 0 means no cap.
  std::size_t limit = 0;
  // Cap on reserved device memory per device as a fraction of its total memory; 1 = whole.
  double fraction = 1.0;
  // Largest request served from slabs; larger ones come from the block pool.
  std::size_t slab_max = 256 * KiB;
  // Segment size for block-pool requests up to half of it; larger requests get a segment of
  // their own, rounded to 2 MiB.
  std::size_t large_segment = 20 * MiB;
  // Serve requests from virtual address ranges whose pages are mapped on demand, when the
  // device supports virtual memory management; else (or when false) from plain segments.
  bool vmm = true;
  // Paged mode: idle mapped pages (free, kept mapped where they are) allowed as a fraction of
  // reserved memory before a request takes an idle page from elsewhere instead of new memory.
  // 0 by default since 2026-12-07: new memory for pages that keep losing theirs comes from
  // remap_growth, which is bounded by what it costs; a slack kept idle pages of every workload
  // (2-3% of reserved on the shared traces) whether or not they saved a remap.
  double page_slack = 0.0;
  // Paged mode: new memory for pages that keep losing their physical page to other pages
  // (PhysicalPages::acquire, a "chronic" claim: part of a cycle in which more pages are in
  // use than there is memory for), allowed while reserved memory stays within
  // (1 + remap_growth) x the peak of memory allocated since the cache was last emptied
  // (Ledger::allocated_high). Each turn of such a cycle costs a
  // remap; new memory ends it. Driven by remaps seen, so a workload without cycles never grows
  // this way. 0.1: the cycles of fixed-shape steps need up to about that (a generated training
  // step with tensors of 1-64 MiB needed 10% to stop remapping, tests/unit/
  // test_remap_policy.cpp; the shared traces 0.4-1.7%), and on the H100 llama_train_varlen
  // ran 3% slower at 0.02 (47 maps and unmaps a step) than at 0.1 (2) (docs/benchmarks.md, "Chronic
  // growth bounded by overhead"). 0: such pages take idle pages like any other.
  double remap_growth = 0.10;
  // Paged mode: the size of a page, the unit of physical memory that is created, mapped, lent
  // and moved; rounded up to a multiple of the driver's granularity (0: the granularity, 2 MiB
  // on current GPUs). The driver's calls cost about the same per call up to 16 MiB, so larger
  // pages cut the cost of mapping a byte several times, for memory rounded to larger units.
  // 8 MiB by default: on the H100 it brought mixed sizes to 98-152 ns/op (2 MiB: 197-219),
  // varlen training and inference to within about 1% of native in one round, and resumes into
  // idle pages to 96-100% of the bare copy (2 MiB: 23-64%), for a few tenths of a percent more
  // reserved memory. Its weak case: resumes right after empty_cache, 64-79% against 89-95%
  // (docs/benchmarks.md, "The 8 MiB default on the GPU").
  std::size_t page_size = 8 * MiB;
  // The host tier: with Offload::host, requests past the device budget are served from host
  // memory mapped into the device's address space (paged mode: host-located physical pages,
  // movable back; otherwise pinned mapped host memory).
  Offload offload = Offload::none;
  // Cap on host memory held by the host tier, in bytes; 0 means no cap.
  std::size_t host_limit = 0;
  // Automatic promotion: after a free, when everything on the host fits in this fraction of
  // the device budget, spilled pages move back to the device (0: only on request).
  double promote = 0.0;
  // Empty slabs kept per size class and stream before they are returned to the block pool.
  std::size_t slab_keep = 1;
  // Set by the interposer, not by CUDALLOC_CONF (see StreamVisibility). The safe default.
  StreamVisibility streams = StreamVisibility::unseen_possible;
  // Run the invariant checker after every operation (slow; for debugging).
  bool validate = false;
  // Time every device call by kind (the runtime puts a TimedDevice under the allocator); the
  // logs of pause and resume then say where their time went.
  bool time_device_calls = false;
  // Events kept per device in the trace ring buffer (0: no trace).
  std::size_t trace = 0;
  // Snapshot files written when an allocation fails for lack of memory, and at exit ("" =
  // none). "%p" expands to the process id; in snapshot_on_oom "%n" expands to the
  // out-of-memory error's number in the process, and without "%n" later ones get ".2", ".3"...
  // before the extension (snapshot/snapshot_json.h, oom_snapshot_path).
  std::string snapshot_on_oom;
  std::string snapshot_at_exit;
  // At most this many snapshot_on_oom files per process (0: no cap).
  std::size_t snapshot_on_oom_max = 16;
};

}  // namespace cudalloc
