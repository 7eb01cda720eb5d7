// Parser from tokens to the syntax tree, following jinja2/parser.py's grammar and precedence.
// Unknown tags, filters and tests, and constructs we do not implement, are errors with a position.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "tokenizer/jinja/ast.h"

namespace pg::jinja {

// Filter/test tables (filters.cpp): name -> index, or -1 when unknown.
int find_filter(std::string_view name);
int find_test(std::string_view name);

Result<std::shared_ptr<const Program>> parse_program(std::string_view source);

}  // namespace pg::jinja
