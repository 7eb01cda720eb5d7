// Jinja tokenizer (see lexer.h). Each rule below names the jinja2/lexer.py regex it implements;
// whitespace control follows Lexer.tokeniter's OptionalLStrip handling exactly.
#include "tokenizer/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "tokenizer/jinja/py_text.h"

namespace pg::jinja {

Status syntax_error_at(Pos pos, std::string_view message) {
  return invalid_argument("template error at {}:{}: {}", pos.line, pos.col, message);
}

namespace {

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

// Python's `'\n'`-normalised source without its one trailing newline (keep_trailing_newline=False).
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  Status run(std::vector<Token>& out);

 private:
  bool at(size_t i, std::string_view lit) const {
    return i + lit.size() <= src_.size() && src_.compare(i, lit.size(), lit) == 0;
  }
  // Offset after any run of Unicode whitespace starting at i (regex \s*).
  size_t skip_ws(size_t i) const {
    while (i < src_.size()) {
      size_t j = i;
      if (!py::is_space(py::next_cp(src_, j))) break;
      i = j;
    }
    return i;
  }
  Pos pos_of(size_t off);
  void emit(std::vector<Token>& out, TokType t, size_t off, std::string text = {}) {
    Token tok;
    tok.type = t;
    tok.pos = pos_of(off);
    tok.text = std::move(text);
    out.push_back(std::move(tok));
  }
  // OptionalLStrip: the text before a tag, after `-` stripping or lstrip_blocks.
  std::string_view strip_before_tag(std::string_view text, char sign, bool is_variable) const;
  size_t match_raw_begin(size_t j) const;
  Status lex_comment(size_t body, size_t tag_off, size_t& end);
  Status lex_raw(size_t body, size_t tag_off, std::vector<Token>& out, size_t& end);
  Status lex_tag(bool is_block, size_t& p, std::vector<Token>& out);
  Status lex_number(size_t& p, std::vector<Token>& out, bool& matched);
  Status lex_string(size_t& p, std::vector<Token>& out, bool& matched);

  std::string src_;
  bool line_starting_ = true;
  // Incremental position cursor (offsets are requested in increasing order).
  size_t cur_off_ = 0;
  Pos cur_pos_{1, 1};
};

Pos Lexer::pos_of(size_t off) {
  if (off < cur_off_) {
    cur_off_ = 0;
    cur_pos_ = {1, 1};
  }
  while (cur_off_ < off && cur_off_ < src_.size()) {
    if (src_[cur_off_] == '\n') {
      ++cur_pos_.line;
      cur_pos_.col = 1;
      ++cur_off_;
    } else {
      py::next_cp(src_, cur_off_);
      ++cur_pos_.col;
    }
  }
  return cur_pos_;
}

std::string_view Lexer::strip_before_tag(std::string_view text, char sign, bool is_variable) const {
  if (sign == '-') {
    // text.rstrip(): all trailing Unicode whitespace.
    return text.substr(0, py::strip_range(text, nullptr, false, true).end);
  }
  if (sign != '+' && !is_variable) {
    // lstrip_blocks: drop the whitespace (\s+, Unicode) between the last newline (or a line
    // start) and the tag.
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos > 0 || line_starting_) {
      const std::string_view tail = text.substr(l_pos);
      if (py::strip_range(tail, nullptr, true, false).begin == tail.size()) return text.substr(0, l_pos);
    }
  }
  return text;
}

// root_raw_re: {%(-|+|)\s*raw\s*(?:-%}\s*|%})  -- j is just past the sign. Returns the match end.
size_t Lexer::match_raw_begin(size_t j) const {
  size_t k = skip_ws(j);
  if (!at(k, "raw")) return std::string::npos;
  k = skip_ws(k + 3);
  if (at(k, "-%}")) return skip_ws(k + 3);
  if (at(k, "%}")) return k + 2;
  return std::string::npos;
}

// Comment body: (.*?)((?:\+#}|\-#}\s*|#}\n?))
Status Lexer::lex_comment(size_t body, size_t tag_off, size_t& end) {
  for (size_t k = body; k < src_.size(); ++k) {
    if (src_[k] == '+' && at(k + 1, "#}")) {
      end = k + 3;
      return ok_status();
    }
    if (src_[k] == '-' && at(k + 1, "#}")) {
      end = skip_ws(k + 3);
      return ok_status();
    }
    if (at(k, "#}")) {
      end = k + 2;
      if (end < src_.size() && src_[end] == '\n') ++end;
      return ok_status();
    }
  }
  return syntax_error_at(pos_of(tag_off), "missing end of comment tag");
}

// Raw body: (.*?)((?:{%(-|+|))\s*endraw\s*(?:\+%}|\-%}\s*|%}\n?))
Status Lexer::lex_raw(size_t body, size_t tag_off, std::vector<Token>& out, size_t& end) {
  for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
    size_t j = k + 2;
    char sign = 0;
    if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
    j = skip_ws(j);
    if (!at(j, "endraw")) continue;
    j = skip_ws(j + 6);
    size_t e;
    if (at(j, "+%}")) {
      e = j + 3;
    } else if (at(j, "-%}")) {
      e = skip_ws(j + 3);
    } else if (at(j, "%}")) {
      e = j + 2;
      if (e < src_.size() && src_[e] == '\n') ++e;
    } else {
      continue;
    }
    const std::string_view text = strip_before_tag(std::string_view(src_).substr(body, k - body), sign, false);
    if (!text.empty()) emit(out, TokType::kData, body, std::string(text));
    line_starting_ = src_[e - 1] == '\n';
    end = e;
    return ok_status();
  }
  return syntax_error_at(pos_of(tag_off), "missing end of raw directive");
}

Status Lexer::run(std::vector<Token>& out) {
  size_t p = 0;
  while (p < src_.size()) {
    // root: (.*?)(?:raw_begin|{{(-|+|)|{#(-|+|)|{%(-|+|))
    size_t i = p;
    for (;; ++i) {
      i = src_.find('{', i);
      if (i == std::string::npos || i + 1 >= src_.size()) {
        i = std::string::npos;
        break;
      }
      const char k = src_[i + 1];
      if (k == '{' || k == '%' || k == '#') break;
    }
    if (i == std::string::npos) {  // data: .+
      emit(out, TokType::kData, p, src_.substr(p));
      break;
    }
    const char kind = src_[i + 1];
    size_t j = i + 2;
    char sign = 0;
    if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
    const size_t raw_end = kind == '%' ? match_raw_begin(j) : std::string::npos;
    const std::string_view text = strip_before_tag(std::string_view(src_).substr(p, i - p), sign, kind == '{');
    if (!text.empty()) emit(out, TokType::kData, p, std::string(text));

    if (raw_end != std::string::npos) {
      line_starting_ = src_[raw_end - 1] == '\n';
      PG_TRY(lex_raw(raw_end, i, out, p));
      continue;
    }
    if (kind == '#') {
      PG_TRY(lex_comment(j, i, p));
      line_starting_ = src_[p - 1] == '\n';
      continue;
    }
    emit(out, kind == '{' ? TokType::kVarBegin : TokType::kBlockBegin, i);
    p = j;
    PG_TRY(lex_tag(kind == '%', p, out));
  }
  if (out.empty() || out.back().type != TokType::kEof) emit(out, TokType::kEof, src_.size());
  return ok_status();
}

// Inside {{ }} or {% %}: the end rule (when brackets balance), then whitespace, float, integer,
// name, string and operator rules, in jinja2's order.
Status Lexer::lex_tag(bool is_block, size_t& p, std::vector<Token>& out) {
  std::vector<char> balance;  // expected closing brackets
  while (true) {
    if (balance.empty()) {
      size_t e = std::string::npos;
      if (is_block) {
        if (at(p, "+%}")) {
          e = p + 3;
        } else if (at(p, "-%}")) {
          e = skip_ws(p + 3);
        } else if (at(p, "%}")) {
          e = p + 2;
          if (e < src_.size() && src_[e] == '\n') ++e;  // trim_blocks
        }
      } else {
        if (at(p, "-}}")) {
          e = skip_ws(p + 3);
        } else if (at(p, "}}")) {
          e = p + 2;
        }
      }
      if (e != std::string::npos) {
        emit(out, is_block ? TokType::kBlockEnd : TokType::kVarEnd, p);
        line_starting_ = src_[e - 1] == '\n';
        p = e;
        return ok_status();
      }
    }
    if (p >= src_.size()) {  // the parser reports the unexpected end of the template
      emit(out, TokType::kEof, p);
      return ok_status();
    }
    const size_t ws = skip_ws(p);
    if (ws > p) {
      p = ws;
      continue;
    }
    bool matched = false;
    PG_TRY(lex_number(p, out, matched));
    if (matched) continue;
    if (is_name_start(src_[p])) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      emit(out, TokType::kName, p, src_.substr(p, e - p));
      p = e;
      continue;
    }
    PG_TRY(lex_string(p, out, matched));
    if (matched) continue;
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    std::string op;
    for (std::string_view t : kTwo)
      if (at(p, t)) op = std::string(t);
    if (op.empty() && std::string_view("+-/*%~[](){}><=.:|,;").find(src_[p]) != std::string_view::npos)
      op = std::string(1, src_[p]);
    if (op.empty()) {
      size_t q = p;
      const char32_t c = py::next_cp(src_, q);
      std::string shown;
      py::append_utf8(shown, c);
      return syntax_error_at(pos_of(p), fmt::format("unexpected char {}", py::str_repr(shown)));
    }
    if (op == "(" || op == "[" || op == "{") {
      balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
    } else if (op == ")" || op == "]" || op == "}") {
      if (balance.empty()) return syntax_error_at(pos_of(p), fmt::format("unexpected '{}'", op));
      if (balance.back() != op[0])
        return syntax_error_at(pos_of(p), fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
      balance.pop_back();
    }
    emit(out, TokType::kOp, p, op);
    p += op.size();
  }
}

// Digits with single underscores between them: (\d+_)*\d+. Returns the end or npos.
size_t digit_group(const std::string& s, size_t i) {
  if (i >= s.size() || !is_ascii_digit(s[i])) return std::string::npos;
  while (true) {
    while (i < s.size() && is_ascii_digit(s[i])) ++i;
    if (i + 1 < s.size() && s[i] == '_' && is_ascii_digit(s[i + 1])) {
      ++i;
      continue;
    }
    return i;
  }
}

Status Lexer::lex_number(size_t& p, std::vector<Token>& out, bool& matched) {
  matched = false;
  if (!is_ascii_digit(src_[p])) return ok_status();
  // float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
  if (p == 0 || src_[p - 1] != '.') {
    const size_t int_end = digit_group(src_, p);
    size_t frac_end = std::string::npos;
    if (int_end < src_.size() && src_[int_end] == '.') frac_end = digit_group(src_, int_end + 1);
    auto exp_at = [&](size_t k) -> size_t {
      if (k >= src_.size() || (src_[k] != 'e' && src_[k] != 'E')) return std::string::npos;
      ++k;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      return digit_group(src_, k);
    };
    size_t end = std::string::npos;
    if (frac_end != std::string::npos) end = exp_at(frac_end);
    if (end == std::string::npos) end = exp_at(int_end);
    if (end == std::string::npos) end = frac_end;
    if (end != std::string::npos) {
      std::string digits;
      for (size_t k = p; k < end; ++k)
        if (src_[k] != '_') digits.push_back(src_[k]);
      emit(out, TokType::kFloat, p);
      out.back().fval = std::strtod(digits.c_str(), nullptr);
      p = end;
      matched = true;
      return ok_status();
    }
  }
  // integer_re: 0b(_?[01])+ | 0o(_?[0-7])+ | 0x(_?[\da-f])+ | [1-9](_?\d)* | 0(_?0)*
  auto prefixed = [&](size_t k, int base) -> size_t {
    auto ok = [&](char c) {
      if (base == 2) return c == '0' || c == '1';
      if (base == 8) return c >= '0' && c <= '7';
      return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    };
    size_t e = k, n = 0;
    while (true) {
      size_t q = e;
      if (q < src_.size() && src_[q] == '_') ++q;
      if (q < src_.size() && ok(src_[q])) {
        e = q + 1;
        ++n;
      } else {
        break;
      }
    }
    return n > 0 ? e : std::string::npos;
  };
  int base = 10;
  size_t end = std::string::npos, digits_from = p;
  if (src_[p] == '0' && p + 1 < src_.size()) {
    const char b = static_cast<char>(src_[p + 1] | 0x20);
    base = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 10;
    if (base != 10) {
      end = prefixed(p + 2, base);
      digits_from = p + 2;
      if (end == std::string::npos) base = 10;
    }
  }
  if (end == std::string::npos) {
    base = 10;
    digits_from = p;
    end = p + 1;
    const char lead = src_[p];
    while (true) {
      size_t q = end;
      if (q < src_.size() && src_[q] == '_') ++q;
      if (q < src_.size() && (lead == '0' ? src_[q] == '0' : is_ascii_digit(src_[q])))
        end = q + 1;
      else
        break;
    }
  }
  uint64_t v = 0;
  for (size_t k = digits_from; k < end; ++k) {
    if (src_[k] == '_') continue;
    const char c = static_cast<char>(src_[k] | 0x20);
    const uint64_t d = is_ascii_digit(c) ? static_cast<uint64_t>(c - '0') : static_cast<uint64_t>(c - 'a' + 10);
    if (v > (static_cast<uint64_t>(INT64_MAX) - d) / static_cast<uint64_t>(base))
      return unsupported("template error at {}:{}: integer literal does not fit in 64 bits", pos_of(p).line,
                         pos_of(p).col);
    v = v * static_cast<uint64_t>(base) + d;
  }
  emit(out, TokType::kInt, p);
  out.back().ival = static_cast<int64_t>(v);
  p = end;
  matched = true;
  return ok_status();
}

// string_re plus Python's unicode-escape decoding of the body (after backslashreplace, so
// non-ASCII text passes through unchanged).
Status Lexer::lex_string(size_t& p, std::vector<Token>& out, bool& matched) {
  matched = false;
  const char q = src_[p];
  if (q != '\'' && q != '"') return ok_status();
  size_t e = p + 1;
  while (e < src_.size() && src_[e] != q) e += src_[e] == '\\' ? 2 : 1;
  if (e >= src_.size()) return ok_status();  // unterminated: the operator rule reports it
  const std::string_view body = std::string_view(src_).substr(p + 1, e - p - 1);
  std::string val;
  val.reserve(body.size());
  auto hex = [&](size_t at, int n, uint32_t& cp) {
    cp = 0;
    if (at + n > body.size()) return false;
    for (int k = 0; k < n; ++k) {
      const char c = static_cast<char>(body[at + k] | 0x20);
      if (is_ascii_digit(body[at + k]))
        cp = cp * 16 + static_cast<uint32_t>(body[at + k] - '0');
      else if (c >= 'a' && c <= 'f')
        cp = cp * 16 + static_cast<uint32_t>(c - 'a' + 10);
      else
        return false;
    }
    return true;
  };
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\') {
      val.push_back(body[i++]);
      continue;
    }
    const char c = body[i + 1];  // string_re guarantees a character after a backslash
    i += 2;
    uint32_t cp = 0;
    switch (c) {
      case '\n': break;  // line continuation
      case '\\': val.push_back('\\'); break;
      case '\'': val.push_back('\''); break;
      case '"': val.push_back('"'); break;
      case 'a': val.push_back('\a'); break;
      case 'b': val.push_back('\b'); break;
      case 'f': val.push_back('\f'); break;
      case 'n': val.push_back('\n'); break;
      case 'r': val.push_back('\r'); break;
      case 't': val.push_back('\t'); break;
      case 'v': val.push_back('\v'); break;
      case 'x':
      case 'u':
      case 'U': {
        const int n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        if (!hex(i, n, cp))
          return syntax_error_at(pos_of(p), fmt::format("truncated \\{} escape in string literal", c));
        if (cp > 0x10FFFF) return syntax_error_at(pos_of(p), "illegal Unicode character in string literal");
        if (cp >= 0xD800 && cp <= 0xDFFF)
          return unsupported("template error at {}:{}: lone surrogate in string literal", pos_of(p).line,
                             pos_of(p).col);
        py::append_utf8(val, cp);
        i += static_cast<size_t>(n);
        break;
      }
      case 'N':
        return unsupported("template error at {}:{}: \\N{{...}} escapes are not supported", pos_of(p).line,
                           pos_of(p).col);
      default:
        if (c >= '0' && c <= '7') {
          cp = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[i++] - '0');
          py::append_utf8(val, cp);
        } else if (static_cast<unsigned char>(c) >= 0x80) {
          // Backslash before a non-ASCII character: Python saw "\\" + "\xe9", giving "\" + "xe9".
          size_t k = i - 1;
          const char32_t ch = py::next_cp(body, k);
          i = k;
          val += ch < 0x100     ? fmt::format("\\x{:02x}", static_cast<uint32_t>(ch))
                 : ch < 0x10000 ? fmt::format("\\u{:04x}", static_cast<uint32_t>(ch))
                                : fmt::format("\\U{:08x}", static_cast<uint32_t>(ch));
        } else {
          val.push_back('\\');  // unknown escapes stay as written
          val.push_back(c);
        }
    }
  }
  emit(out, TokType::kString, p, std::move(val));
  p = e + 1;
  matched = true;
  return ok_status();
}

}  // namespace

Result<std::vector<Token>> lex(std::string_view source) {
  if (!py::is_valid_utf8(source)) return invalid_argument("template is not valid UTF-8");
  Lexer lexer(normalize(source));
  std::vector<Token> out;
  PG_TRY(lexer.run(out));
  return out;
}

}  // namespace pg::jinja
