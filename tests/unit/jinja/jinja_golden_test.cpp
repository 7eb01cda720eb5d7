// Golden parity: every snippet and every (chat template, conversation) pair must render byte for
// byte like Python Jinja2 under transformers' settings (tools/jinja_golden.py wrote the goldens;
// PG_JINJA_GOLDEN_DIR points at freshly regenerated ones in the live ctest variant).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/unit/jinja/jinja_test_util.h"
#include "tokenizer/jinja/chat_template.h"
#include "tokenizer/jinja/template.h"

namespace pg::jinja {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

fs::path golden_dir() {
  if (const char* d = std::getenv("PG_JINJA_GOLDEN_DIR"); d != nullptr && *d != '\0') return d;
  return cases_dir() / "golden";
}

struct Failure {
  std::string name, detail;
};

void report(const std::vector<Failure>& failures, size_t n_cases) {
  for (size_t i = 0; i < failures.size() && i < 40; ++i)
    ADD_FAILURE() << failures[i].name << ": " << failures[i].detail;
  EXPECT_EQ(failures.size(), 0u) << "of " << n_cases << " cases";
}

std::string show(const std::string& s) { return ordered_json(s).dump(); }

TEST(GoldenSnippets, MatchJinja2) {
  const ordered_json expected = read_json(golden_dir() / "snippets.json");
  std::vector<Failure> failures;
  size_t n = 0;
  for (const char* file : {"snippets.json", "whitespace_cases.json"}) {
    for (const auto& c : read_json(cases_dir() / file)) {
      ++n;
      const std::string name = c["name"].get<std::string>();
      const std::string src = c["template"].get<std::string>();
      const ordered_json ctx = c.contains("context") ? c["context"] : ordered_json::object();
      ASSERT_TRUE(expected.contains(name)) << "no golden for " << name << " (rerun tools/jinja_golden.py)";
      const ordered_json& want = expected[name];
      auto tmpl = Template::parse(src);
      Result<std::string> got =
          tmpl.ok() ? tmpl->render(ctx, fixed_clock_options()) : Result<std::string>(tmpl.status());
      if (want.contains("output")) {
        const std::string out = want["output"].get<std::string>();
        if (!got.ok()) {
          failures.push_back(
              {name, "template " + show(src) + " expected " + show(out) + ", got error " + got.status().to_string()});
        } else if (*got != out) {
          failures.push_back(
              {name, "template " + show(src) + "\n  expected " + show(out) + "\n  got      " + show(*got)});
        }
      } else {
        const std::string err = want["error"].get<std::string>();
        if (got.ok()) {
          failures.push_back({name, "template " + show(src) + " expected error (" + err + "), got " + show(*got)});
        } else if (err.rfind("TemplateError: ", 0) == 0 && got.status().message() != err.substr(15)) {
          failures.push_back(
              {name, "raise_exception message " + show(got.status().message()) + " != " + show(err.substr(15))});
        }
      }
    }
  }
  report(failures, n);
}

TEST(GoldenChat, MatchJinja2) {
  const ordered_json tokens = read_json(cases_dir() / "templates" / "special_tokens.json");
  std::vector<Failure> failures;
  size_t n = 0;
  for (const auto& t : sorted_files(cases_dir() / "templates", ".jinja")) {
    const std::string stem = t.stem().string();
    auto chat = ChatTemplate::from_source(read_file(t), tokens.contains(stem) ? tokens[stem] : ordered_json::object());
    ASSERT_TRUE(chat.ok()) << stem << ": " << chat.status().to_string();
    for (const auto& c : sorted_files(cases_dir() / "conversations", ".json")) {
      ++n;
      const std::string name = stem + "__" + c.stem().string();
      const ChatRequest req = request_from_conversation(read_json(c));
      auto segs = chat->render_segments(req, fixed_clock_options());
      const fs::path txt = golden_dir() / "chat" / (name + ".txt");
      const fs::path err = golden_dir() / "chat" / (name + ".error");
      if (fs::exists(txt)) {
        const std::string want = read_file(txt);
        if (!segs.ok()) {
          failures.push_back({name, "expected output, got error " + segs.status().to_string()});
          continue;
        }
        std::string got;
        for (const auto& s : *segs) got += s.text;
        if (got != want) failures.push_back({name, "\n  expected " + show(want) + "\n  got      " + show(got)});
        auto plain = chat->render(req, fixed_clock_options());
        if (!plain.ok() || *plain != got) failures.push_back({name, "render() differs from render_segments()"});
      } else {
        ASSERT_TRUE(fs::exists(err)) << "no golden for " << name << " (rerun tools/jinja_golden.py)";
        if (segs.ok())
          failures.push_back(
              {name, "expected error (" + read_file(err) + "), got " + show(segs->empty() ? "" : segs->front().text)});
      }
    }
  }
  EXPECT_GE(n, 3u * 12u);
  report(failures, n);
}

}  // namespace
}  // namespace pg::jinja
