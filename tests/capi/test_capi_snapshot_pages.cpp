// The pages of paged segments in cudalloc_snapshot_json, on the simulated device (paged by
// default): runs of one state, covering each segment, in agreement with what the allocator
// reports through the C API (mapped bytes, residency of regions).
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "cudalloc.h"

namespace {

using nlohmann::json;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;

json snapshot() {
  std::size_t length = 0;
  cudalloc_snapshot_json(nullptr, 0, &length);
  std::string text(length + 1, '\0');
  REQUIRE(cudalloc_snapshot_json(text.data(), text.size(), &length) == CUDALLOC_SUCCESS);
  text.resize(length);
  return json::parse(text);
}

std::int64_t mapped_bytes() {
  cudalloc_stats_t s;
  REQUIRE(cudalloc_get_stats(0, &s) == CUDALLOC_SUCCESS);
  for (int i = 0; i < s.count; ++i) {
    if (std::string(cudalloc_stat_name(i)) == "mapped_bytes") return s.values[i].current;
  }
  FAIL("no stat mapped_bytes");
  return -1;
}

// Checks that the pages of every paged segment tile it, with no two neighbours in the same
// state and a location on each mapped run only; returns the bytes of the mapped runs.
std::uint64_t check_runs(const json& doc) {
  std::uint64_t mapped = 0;
  for (const json& seg : doc["segments"]) {
    if (!seg["is_expandable"].get<bool>()) {
      CHECK_FALSE(seg.contains("pages"));
      continue;
    }
    REQUIRE(seg.contains("pages"));
    std::uint64_t at = seg["address"];
    const json* previous = nullptr;
    for (const json& run : seg["pages"]) {
      REQUIRE(run["address"] == at);
      const bool is_mapped = run["mapped"];
      CHECK(run.contains("location") == is_mapped);
      if (previous != nullptr) {
        CHECK(((*previous)["mapped"] != run["mapped"] ||
               previous->value("location", "") != run.value("location", "")));
      }
      at += run["size"].get<std::uint64_t>();
      mapped += is_mapped ? run["size"].get<std::uint64_t>() : 0;
      previous = &run;
    }
    CHECK(at == seg["address"].get<std::uint64_t>() + seg["total_size"].get<std::uint64_t>());
  }
  return mapped;
}

// The segments of one stream (each test uses a stream of its own), in address order.
std::vector<json> segments_of(const json& doc, std::uintptr_t stream) {
  std::vector<json> out;
  for (const json& seg : doc["segments"]) {
    if (seg["stream"] == stream) out.push_back(seg);
  }
  return out;
}

// Bytes of the runs of region `tag`'s segments that are mapped (on `location`) or unmapped.
std::uint64_t region_runs(const json& doc, const std::string& tag, bool mapped,
                          const std::string& location = "") {
  std::uint64_t bytes = 0;
  for (const json& seg : doc["segments"]) {
    if (seg.value("region", "") != tag) continue;
    for (const json& run : seg["pages"]) {
      if (run["mapped"] == mapped && run.value("location", "") == location) {
        bytes += run["size"].get<std::uint64_t>();
      }
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("C API: a snapshot lists the pages of paged segments as runs", "[capi][snapshot]") {
  const auto stream = reinterpret_cast<cudaStream_t>(std::uintptr_t{0x9a9e5});
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  // A page each (8 MiB, the default page_size), so that freeing b frees whole pages.
  REQUIRE(cudalloc_allocate(&a, 8 * kMiB, 0, stream) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_allocate(&b, 8 * kMiB, 0, stream) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_allocate(&c, 8 * kMiB, 0, stream) == CUDALLOC_SUCCESS);
  std::vector<json> mine = segments_of(snapshot(), 0x9a9e5);
  REQUIRE(mine.size() == 1);
  REQUIRE(mine[0]["pages"].size() == 1);  // three pages on the device: one run
  CHECK(mine[0]["pages"][0]["location"] == "device");
  CHECK(mine[0]["pages"][0]["size"] == 24 * kMiB);

  // b freed and the cache emptied: its pages are unmapped, which cuts the range in two.
  REQUIRE(cudalloc_deallocate(b, 0) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_empty_cache(0) == CUDALLOC_SUCCESS);
  const json doc = snapshot();
  CHECK(check_runs(doc) == static_cast<std::uint64_t>(mapped_bytes()));
  mine = segments_of(doc, 0x9a9e5);
  REQUIRE(mine.size() == 2);
  for (const json& seg : mine) {
    REQUIRE(seg["pages"].size() == 1);
    CHECK(seg["pages"][0]["mapped"] == true);
    CHECK(seg["pages"][0]["size"] == seg["total_size"]);
  }
  const std::uint64_t first_end =
      mine[0]["address"].get<std::uint64_t>() + mine[0]["total_size"].get<std::uint64_t>();
  CHECK(mine[1]["address"].get<std::uint64_t>() - first_end == 8 * kMiB);  // b's page
  REQUIRE(cudalloc_deallocate(a, 0) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_deallocate(c, 0) == CUDALLOC_SUCCESS);
}

TEST_CASE("C API: a paused region's pages are unmapped (dropped) or on the host (kept)",
          "[capi][snapshot]") {
  const std::string tag = "capi-page-runs";
  void* p = nullptr;
  REQUIRE(cudalloc_region_begin(tag.c_str()) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_allocate(&p, 6 * kMiB, 0, nullptr) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_region_end() == CUDALLOC_SUCCESS);
  std::size_t device_bytes = 0, host_bytes = 0;
  REQUIRE(cudalloc_region_residency(tag.c_str(), &device_bytes, &host_bytes) == CUDALLOC_SUCCESS);
  CHECK(region_runs(snapshot(), tag, true, "device") == device_bytes);

  REQUIRE(cudalloc_pause(tag.c_str(), 1) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_region_residency(tag.c_str(), &device_bytes, &host_bytes) == CUDALLOC_SUCCESS);
  json doc = snapshot();
  check_runs(doc);
  CHECK(region_runs(doc, tag, true, "host") == host_bytes);
  CHECK(region_runs(doc, tag, true, "device") == device_bytes);
  REQUIRE(cudalloc_resume(tag.c_str()) == CUDALLOC_SUCCESS);

  REQUIRE(cudalloc_pause(tag.c_str(), 0) == CUDALLOC_SUCCESS);
  doc = snapshot();
  check_runs(doc);
  CHECK(region_runs(doc, tag, false) >= 6 * kMiB);  // dropped: every page unmapped
  CHECK(region_runs(doc, tag, true, "device") + region_runs(doc, tag, true, "host") == 0);
  REQUIRE(cudalloc_resume(tag.c_str()) == CUDALLOC_SUCCESS);
  REQUIRE(cudalloc_deallocate(p, 0) == CUDALLOC_SUCCESS);
}
