// The method registry (src/compress/registry.*, one record per method in
// src/compress/methods/): lookups, the properties the engine asks instead of a method's name,
// the trace fields each method declares against what its compressions fill, and the methods
// table of docs/METHODS.md against the registry.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compress/registry.h"
#include "core/error.h"
#include "rkv/compression.h"
#include "test_util.h"

namespace {

using rkv::CompressionParams;
using rkv::MethodInfo;

std::set<std::string> names_where(bool (*property)(const MethodInfo&)) {
  std::set<std::string> names;
  for (const auto& info : rkv::method_table()) {
    if (property(info)) names.insert(std::string(info.name));
  }
  return names;
}

TEST(CompressionRegistry, OneRecordPerMethodFoundByEnumAndByName) {
  const auto records = rkv::compress::method_records();
  ASSERT_EQ(records.size(), rkv::method_table().size());
  std::set<std::string> names;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const MethodInfo& info = rkv::method_table()[i];
    EXPECT_EQ(static_cast<std::size_t>(info.method), i) << info.name;
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << info.name;
    EXPECT_EQ(&rkv::method_info(info.method), &info);
    EXPECT_EQ(&rkv::method_info(info.name), &info);
    EXPECT_EQ(&rkv::compress::method_record(info.method), &records[i]);
    EXPECT_EQ(records[i].info.name, info.name);
    EXPECT_NE(records[i].stages, nullptr) << info.name;
    EXPECT_EQ(CompressionParams::defaults(info.name).to_json(),
              CompressionParams::defaults(info.method).to_json());
    EXPECT_EQ(CompressionParams::defaults(info.method).info().name, info.name);
  }
  EXPECT_THROW(rkv::method_info("snapkv2"), rkv::Error);
  EXPECT_THROW(CompressionParams::defaults("snapkv2"), rkv::Error);
}

TEST(CompressionRegistry, NoneIsTheMethodThatNeverCompresses) {
  const CompressionParams none = CompressionParams::none();
  EXPECT_FALSE(none.info().compresses);
  EXPECT_EQ(none.to_json(), CompressionParams::defaults("fullkv").to_json());
  EXPECT_NO_THROW(none.validate());
  EXPECT_FALSE(rkv::should_compress(1 << 20, none));
}

// What the engine, server and tools used to decide by a method's name, now read from the records:
// these pin the answers to what the names gave.
TEST(CompressionRegistry, PropertiesTheEngineAsks) {
  using Set = std::set<std::string>;
  EXPECT_EQ(names_where([](const MethodInfo& i) { return !i.compresses; }), Set{"fullkv"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return !rkv::has_state(i.initial_state); }),
            Set{"gkv"});
  for (const auto& info : rkv::method_table())
    EXPECT_TRUE(!rkv::has_state(info.initial_state) || info.initial_state == 0.0f) << info.name;
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.timing == rkv::Timing::whole_pass; }),
            Set{"triattention"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.pins_prompt; }), Set{"triattention"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.needs.query_stats; }),
            Set{"triattention"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.needs.reads_entry_state; }),
            (Set{"gkv", "h2o"}));
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.needs.step_attention; }), Set{"h2o"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.needs.final_hidden; }), Set{"skipkv"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.needs.token_text; }), Set{"skipkv"});
  EXPECT_EQ(names_where([](const MethodInfo& i) { return i.case_dump; }),
            (Set{"rkv", "snapkv", "streamingllm"}));
  // The methods that keep a window (budget > window, n_all >= window) are those reading it.
  EXPECT_EQ(names_where([](const MethodInfo& i) { return !i.reads("window"); }),
            (Set{"fullkv", "streamingllm", "triattention"}));
}

TEST(CompressionRegistry, NeedsAreConsistent) {
  for (const auto& info : rkv::method_table()) {
    const rkv::StageNeeds& n = info.needs;
    EXPECT_TRUE(!n.entry_state || n.reads_entry_state) << info.name;
    EXPECT_TRUE(!n.step_attention || n.reads_entry_state) << info.name;
    EXPECT_TRUE(!n.final_hidden || (n.token_text && n.positions)) << info.name;
    EXPECT_TRUE(!n.window_queries || info.reads("window")) << info.name;
    EXPECT_TRUE(info.compresses || info.params == std::vector<std::string_view>{"method"})
        << info.name;
  }
}

// One layer with random queries and keys, every entry with a state (an old global score or an
// accumulator), positions 0..n_all-1.
struct RandomLayer {
  int q_heads = 4, kv_heads = 2, head_dim = 16, n_all = 96;
  std::vector<float> queries;
  std::vector<std::vector<float>> keys, state;
  std::vector<std::vector<std::int32_t>> positions;
  std::vector<float> penalty;

  explicit RandomLayer(int window) {
    std::mt19937 rng(11);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    queries.resize(static_cast<std::size_t>(q_heads) * window * head_dim);
    for (float& x : queries) x = normal(rng);
    keys.assign(kv_heads, std::vector<float>(static_cast<std::size_t>(n_all) * head_dim));
    state.assign(kv_heads, std::vector<float>(static_cast<std::size_t>(n_all)));
    positions.assign(kv_heads, std::vector<std::int32_t>(static_cast<std::size_t>(n_all)));
    for (int h = 0; h < kv_heads; ++h) {
      for (float& x : keys[h]) x = normal(rng);
      for (int i = 0; i < n_all; ++i) state[h][i] = std::abs(normal(rng)), positions[h][i] = i;
    }
    penalty.assign(static_cast<std::size_t>(n_all), 0.0f);
    penalty[3] = 0.97f;
  }

  rkv::LayerView view(int window) const {
    rkv::LayerView v;
    v.q_heads = q_heads, v.kv_heads = kv_heads, v.head_dim = head_dim, v.n_all = n_all;
    v.window = window;
    v.queries = queries.data();
    for (int h = 0; h < kv_heads; ++h) {
      v.keys.push_back(keys[h].data());
      v.positions.push_back(positions[h].data());
      v.state.push_back(state[h].data());
    }
    v.position_penalty = penalty;
    return v;
  }
};

std::set<std::string> filled(const rkv::Diagnostics& d) {
  std::set<std::string> names;
  for (const auto& head : d.heads) {
    for (const auto& field : rkv::compress::diagnostic_fields()) {
      if (field.filled(head)) names.insert(std::string(field.name));
    }
  }
  return names;
}

// Each method declares the HeadDiagnostics vectors its compressions fill: with its defaults, and
// with every optional setting it reads turned on, it fills only those, and all of them once.
// (A whole-pass method's are checked where the engine runs it: test_triattention_engine.cpp.)
TEST(CompressionRegistry, TraceFieldsAreWhatEachMethodFills) {
  for (const auto& info : rkv::method_table()) {
    if (info.timing == rkv::Timing::whole_pass) continue;
    std::vector<CompressionParams> variants = {info.defaults};
    if (info.reads("shift_gamma")) {
      CompressionParams shifted = info.defaults;
      shifted.shift_gamma = 200.0f;
      variants.push_back(shifted);
    }
    std::set<std::string> seen;
    for (CompressionParams p : variants) {
      p.budget = 48;
      const RandomLayer layer(p.window);
      rkv::Diagnostics d;
      const rkv::Selection s = rkv::compress_layer(layer.view(p.window), p, &d);
      EXPECT_EQ(s.compressed, info.compresses) << info.name;
      for (const std::string& name : filled(d)) {
        EXPECT_NE(std::find(info.trace_fields.begin(), info.trace_fields.end(), name),
                  info.trace_fields.end())
            << info.name << " fills " << name << " but does not declare it";
        seen.insert(name);
      }
    }
    for (std::string_view name : info.trace_fields) {
      EXPECT_TRUE(seen.count(std::string(name))) << info.name << " declares " << name;
    }
  }
}

// docs/METHODS.md shows `rkv methods --markdown`: the table cannot drift from the registry.
TEST(CompressionRegistry, DocsTableIsTheRegistry) {
  std::ifstream in(rkv::test::source_dir() / "docs" / "METHODS.md");
  ASSERT_TRUE(in) << "docs/METHODS.md";
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string table = rkv::methods_markdown();
  EXPECT_NE(doc.str().find(table), std::string::npos)
      << "docs/METHODS.md does not contain the output of `rkv methods --markdown`:\n"
      << table;
  std::size_t rows = 0;
  for (std::size_t at = table.find("\n| `"); at != std::string::npos;
       at = table.find("\n| `", at + 1))
    ++rows;
  EXPECT_EQ(rows, rkv::method_table().size());
}

TEST(CompressionRegistry, MethodFlagHelpListsTheRegistry) {
  const auto table = rkv::compression_param_table();
  ASSERT_EQ(table.front().name, "method");
  EXPECT_EQ(
      table.front().help,
      "compression method: fullkv|streamingllm|h2o|snapkv|rkv|gkv|skipkv|random|triattention");
}

// Outside src/compress and include/rkv/compression.h no source names a method: everything else
// asks the registry by name or by need. src/engine and include/rkv/engine.h are exempt until the
// engine rewrite (issue 32) switches them to the records; drop the exemption then.
TEST(CompressionRegistry, OnlyCompressNamesAMethod) {
  const std::filesystem::path root = rkv::test::source_dir();
  const std::vector<std::string> exempt = {"src/compress/", "include/rkv/compression.h"};
  for (const char* dir : {"src", "include", "tools", "bench", "fuzz"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;
      const std::string rel = entry.path().lexically_relative(root).generic_string();
      if (std::any_of(exempt.begin(), exempt.end(),
                      [&](const std::string& e) { return rel.rfind(e, 0) == 0; })) {
        continue;
      }
      std::ifstream in(entry.path());
      std::string line;
      for (int number = 1; std::getline(in, line); ++number) {
        EXPECT_EQ(line.find("Method::"), std::string::npos) << rel << ":" << number << ": " << line;
      }
    }
  }
}

}  // namespace
