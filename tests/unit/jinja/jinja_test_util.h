// Helpers shared by the Jinja tests: test-data paths, file/JSON reading, the fixed clock the
// goldens were rendered with (tools/jinja_golden.py FIXED_NOW), conversation -> ChatRequest.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace pg::jinja {

inline std::filesystem::path cases_dir() { return std::filesystem::path(PG_SOURCE_DIR) / "tests" / "unit" / "jinja"; }

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << p;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline nlohmann::ordered_json read_json(const std::filesystem::path& p) {
  return nlohmann::ordered_json::parse(read_file(p), nullptr, /*allow_exceptions=*/false);
}

inline std::vector<std::filesystem::path> sorted_files(const std::filesystem::path& dir, const std::string& ext) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// datetime(2025, 3, 14, 15, 9, 26), a Friday, day 73 of the year.
inline std::tm fixed_now() {
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 2;
  tm.tm_mday = 14;
  tm.tm_hour = 15;
  tm.tm_min = 9;
  tm.tm_sec = 26;
  tm.tm_wday = 5;
  tm.tm_yday = 72;
  tm.tm_isdst = -1;
  return tm;
}

inline RenderOptions fixed_clock_options() {
  RenderOptions o;
  o.now = fixed_now;
  return o;
}

inline ChatRequest request_from_conversation(const nlohmann::ordered_json& conv) {
  ChatRequest r;
  r.messages = conv.at("messages");
  r.add_generation_prompt = conv.value("add_generation_prompt", false);
  if (conv.contains("tools")) r.tools = conv["tools"];
  if (conv.contains("extra")) r.extra = conv["extra"];
  return r;
}

}  // namespace pg::jinja
