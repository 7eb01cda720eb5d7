// `peregrine tokenize MODEL_DIR`: text on stdin -> token ids (space separated) on stdout, or
// with --decode ids on stdin -> text. Uses the model folder's tokenizer.json/tokenizer_config.json.
#include <cctype>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace pg::cli {
namespace {

struct TokenizeOptions {
  std::string model_dir;
  bool decode = false;
  bool no_special = false;    // encode: added-token text is plain text
  bool no_bos = false;        // encode: no BOS even when tokenizer_config.json asks for one
  bool skip_special = false;  // decode: drop special tokens
};

int fail(const std::string& message) {
  std::fprintf(stderr, "peregrine tokenize: %s\n", message.c_str());
  return 1;
}

// Whitespace-separated decimal ids; anything else is an error naming the offending word.
Result<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i >= text.size()) break;
    size_t j = i;
    while (j < text.size() && !std::isspace(static_cast<unsigned char>(text[j]))) ++j;
    const std::string word = text.substr(i, j - i);
    int64_t v = 0;
    bool ok = !word.empty() && word.size() <= 10;
    for (char c : word) ok = ok && c >= '0' && c <= '9';
    if (ok) v = std::stoll(word);
    if (!ok || v > INT32_MAX) return invalid_argument("'{}' (word {} of stdin) is not a token id", word, ids.size() + 1);
    ids.push_back(int32_t(v));
    i = j;
  }
  return ids;
}

int run_tokenize(const TokenizeOptions& o) {
  auto tok = Tokenizer::load(o.model_dir);
  if (!tok.ok()) return fail(tok.status().to_string());
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  if (std::cin.bad()) return fail("error reading stdin");
  if (o.decode) {
    auto ids = parse_ids(input);
    if (!ids.ok()) return fail(ids.status().to_string());
    auto text = tok->decode(*ids, o.skip_special);
    if (!text.ok()) return fail(text.status().to_string());
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }
  EncodeOptions eo;
  eo.parse_special = !o.no_special;
  if (o.no_bos) eo.add_bos = false;
  auto ids = tok->encode(input, eo);
  if (!ids.ok()) return fail(ids.status().to_string());
  std::string out;
  for (size_t i = 0; i < ids->size(); ++i) {
    if (i > 0) out.push_back(' ');
    out += std::to_string((*ids)[i]);
  }
  out.push_back('\n');
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

Command add_tokenize(CLI::App& root) {
  auto opts = std::make_shared<TokenizeOptions>();
  CLI::App* app = root.add_subcommand("tokenize", "Tokenize stdin to ids (space separated), or with --decode turn "
                                                  "ids on stdin back into text");
  app->add_option("MODEL_DIR", opts->model_dir, "Model directory with tokenizer.json (and tokenizer_config.json)")
      ->required();
  app->add_flag("--decode", opts->decode, "Read whitespace-separated ids from stdin and print the text");
  app->add_flag("--no-special", opts->no_special,
                "Do not parse special/added tokens: text like <｜User｜> is tokenized as plain text");
  app->add_flag("--no-bos", opts->no_bos, "Do not prepend the BOS token (tokenizer_config.json add_bos_token)");
  app->add_flag("--skip-special", opts->skip_special, "With --decode: leave special tokens out of the text");
  return {app, [opts] { return run_tokenize(*opts); }};
}

}  // namespace pg::cli
