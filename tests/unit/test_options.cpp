#include <catch2/catch.hpp>

#include "api/options.h"

using namespace cudalloc;

TEST_CASE("CUDALLOC_CONF sets every key", "[options]") {
  Settings s;
  const auto warnings = parse_conf(
      "limit:8G, fraction:0.5,SLAB_MAX:128K,large_segment:40M,slab_keep:3,validate:on", &s);
  CHECK(warnings.empty());
  CHECK(s.limit == 8 * GiB);
  CHECK(s.fraction == 0.5);
  CHECK(s.slab_max == 128 * KiB);
  CHECK(s.large_segment == 40 * MiB);
  CHECK(s.slab_keep == 3);
  CHECK(s.validate);
}

TEST_CASE("bad CUDALLOC_CONF input warns with the key and keeps the default", "[options]") {
  const Settings defaults;
  struct Case {
    const char* conf;
    const char* expect;
  };
  for (const Case& c : {Case{"limit:lots", "'limit'"}, Case{"fraction:0", "'fraction'"},
                        Case{"fraction:1.5", "'fraction'"}, Case{"slab_max:4M", "'slab_max'"},
                        Case{"slab_keep:-1", "'slab_keep'"}, Case{"validate:maybe", "'validate'"},
                        Case{"large_segment:1M", "'large_segment'"},
                        Case{"colour:blue", "unknown key 'colour'"},
                        Case{"limit", "not key:value"}}) {
    INFO(c.conf);
    Settings s;
    const auto warnings = parse_conf(c.conf, &s);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(c.expect) != std::string::npos);
    CHECK(s.limit == defaults.limit);
    CHECK(s.fraction == defaults.fraction);
    CHECK(s.slab_max == defaults.slab_max);
    CHECK(s.slab_keep == defaults.slab_keep);
  }
}

TEST_CASE("good keys still apply next to bad ones; empty items are ignored", "[options]") {
  Settings s;
  const auto warnings = parse_conf(",,limit:1G,,bogus:1,fraction:abc,", &s);
  CHECK(warnings.size() == 2);
  CHECK(s.limit == 1 * GiB);
  CHECK(s.fraction == 1.0);
}

TEST_CASE("the options reference lists every key with its default", "[options]") {
  const std::string md = options_markdown();
  for (const Option& o : options()) CHECK(md.find(std::string("`") + o.key + "`") != std::string::npos);
  CHECK(md.find("| `limit` | bytes | `0` |") != std::string::npos);
}
