#include <catch2/catch.hpp>

#include "api/options.h"
#include "api/runtime.h"

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

TEST_CASE("a bad value's warning says what was expected and what is kept, in human units",
          "[options]") {
  struct Case {
    const char* conf;
    const char* expect;
  };
  for (const Case& c :
       {Case{"limit:lots", "bad value 'lots' for key 'limit': expected a size such as 512K, "
                           "64M or 8G; keeping the default, 0"},
        Case{"slab_max:4M", "for key 'slab_max': expected a size from 256 B to 1 MiB; keeping "
                            "the default, 256 KiB"},
        Case{"large_segment:1M", "expected a size from 2 MiB to 1 EiB"},
        Case{"large_segment:x", "keeping the default, 20 MiB"},
        Case{"limit:2G,limit:lots", "keeping 2 GiB, set earlier"},
        Case{"fraction:2", "expected a number in (0, 1], such as 0.5; keeping the default, 1"},
        Case{"snapshot_on_oom_max:-1", "expected a whole number from 0 to 1048576; keeping the "
                                       "default, 16"},
        Case{"snapshot_on_oom:", "expected a file path; keeping the default, none"}}) {
    INFO(c.conf);
    Settings s;
    const auto warnings = parse_conf(c.conf, &s);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find(c.expect) != std::string::npos);
    INFO(warnings[0]);
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
  CHECK(md.find("| `limit` | bytes | `0` |") != std::string::npos);  // 0: no cap
  CHECK(md.find("| `slab_max` | bytes | `256 KiB` |") != std::string::npos);
  CHECK(md.find("| `large_segment` | bytes | `20 MiB` |") != std::string::npos);
  CHECK(md.find("| `snapshot_on_oom_max` | count | `16` |") != std::string::npos);
  CHECK(md.find("262144") == std::string::npos);
}

TEST_CASE("option values: human units for people, numbers for machines, both read back",
          "[options]") {
  Settings s;
  REQUIRE(parse_conf("limit:1536M,slab_max:1000,host_limit:40G", &s).empty());
  auto option = [](const char* key) {
    for (const Option& o : options()) {
      if (std::string(o.key) == key) return o;
    }
    FAIL("no option " << key);
    return options()[0];
  };
  CHECK(option("limit").get(s) == "1.5 GiB");
  CHECK(option("limit").value(s) == "1610612736");
  CHECK(option("slab_max").get(s) == "1000 B");
  CHECK(option("host_limit").get(s) == "40 GiB");
  CHECK(option("trace").get(s) == "0");
  CHECK(option("fraction").get(s) == option("fraction").value(s));
  // Every value, as a person reads it and as a machine does, gives the same settings back.
  for (const bool human : {true, false}) {
    std::string conf;
    for (const Option& o : options()) {
      const std::string v = human ? o.get(s) : o.value(s);
      if (v.empty()) continue;
      if (!conf.empty()) conf += ",";  // appended: GCC 12 -O3 warns falsely on "" + string
      conf += o.key;
      conf += ":";
      conf += v;
    }
    Settings again;
    INFO(conf);
    CHECK(parse_conf(conf, &again).empty());
    for (const Option& o : options()) CHECK(o.value(again) == o.value(s));
  }
}

TEST_CASE("huge user text is echoed truncated in warnings", "[options]") {
  const std::string huge_key(1 << 20, 'k');
  Settings s;
  for (const std::string& conf : {huge_key + ":1", "limit:" + huge_key, huge_key}) {
    const auto warnings = parse_conf(conf, &s);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].size() < 400);
    CHECK(warnings[0].find(std::string(64, 'k') + "... (") != std::string::npos);
  }
  CHECK(echo("short") == "short");
  CHECK(echo(std::string(64, 'x')) == std::string(64, 'x'));
  CHECK(echo(std::string(65, 'x')) == std::string(64, 'x') + "... (65 bytes)");
}

TEST_CASE("booleans: only 1/true/yes/on are true", "[options]") {
  for (const char* yes : {"1", "true", "TRUE", "yes", "on", " On "}) {
    bool v = false;
    CHECK((parse_bool(yes, &v) && v));
  }
  for (const char* no : {"0", "false", "no", "off", "OFF"}) {
    bool v = true;
    CHECK((parse_bool(no, &v) && !v));
  }
  bool v = false;
  CHECK_FALSE(parse_bool("maybe", &v));
  CHECK_FALSE(parse_bool("", &v));
}

TEST_CASE("a CUDALLOC_DEVICE that names no device layer is warned about", "[options]") {
  for (const char* fine : {"cuda", "CUDA", "fake", "fake:1G", "fake:1G:2", ""}) {
    CHECK(device_choice_warning(fine).empty());
  }
  CHECK(device_choice_warning(nullptr).empty());
  for (const char* garbage : {"banana", "gpu", "cpu:1G", " fake"}) {
    INFO(garbage);
    const std::string w = device_choice_warning(garbage);
    CHECK(w.find(std::string("CUDALLOC_DEVICE='") + garbage + "'") != std::string::npos);
    CHECK(w.find("using the default (cuda)") != std::string::npos);
  }
  CHECK(device_choice_warning(std::string(100000, 'z').c_str()).size() < 300);
}
