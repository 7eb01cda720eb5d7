// Tokenizer for the Jinja template language, mirroring jinja2/lexer.py (3.1) with the settings
// transformers uses: trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pg::jinja {

// 1-based line and column (columns count code points) in the template source.
struct Pos {
  uint32_t line = 0;
  uint32_t col = 0;
};

enum class TokType : uint8_t {
  kData,        // template text between tags (already whitespace-controlled)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // text holds the decoded value
  kInt,
  kFloat,
  kOp,  // text holds the operator: + - * / // % ** ~ == != < > <= >= = . : | , ( ) [ ] { } ;
  kEof,
};

struct Token {
  TokType type = TokType::kEof;
  Pos pos;
  std::string text;
  int64_t ival = 0;
  double fval = 0.0;
};

// "3:14: <message>" error with the template position.
Status syntax_error_at(Pos pos, std::string_view message);

// Splits a template into tokens. Invalid UTF-8, unterminated comments/raw blocks, bad string
// escapes and unexpected characters are errors; the result always ends with a kEof token.
Result<std::vector<Token>> lex(std::string_view source);

}  // namespace pg::jinja
