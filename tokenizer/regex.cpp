// PCRE2 compilation/matching for tokenizer.json patterns and the Oniguruma -> PCRE2 translation.
// Oniguruma semantics follow its doc/RE (Unicode case): \s = U+0009-000D, U+0085, Zs, Zl, Zp;
// \w = Letter | Mark | Decimal_Number | Connector_Punctuation; \h = hex digit; (?m) = dot-all.
#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include "core/check.h"

namespace pg {
namespace {

// Unicode White_Space as a class body (Oniguruma's Unicode \s).
constexpr std::string_view kSpaceBody =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr std::string_view kWordBody = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view kHexBody = "0-9a-fA-F";

size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Copies a braced escape argument "{...}" starting at p[i] (i at '{'); returns the new index.
Result<size_t> copy_braced(std::string_view p, size_t i, std::string& out) {
  const size_t close = p.find('}', i);
  if (close == std::string_view::npos) return invalid_argument("unterminated '{{' at offset {}", i);
  out.append(p.substr(i, close + 1 - i));
  return close + 1;
}

}  // namespace

Result<std::string> Regex::translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  size_t i = 0;
  auto unsupported_at = [&](std::string_view what) {
    return unsupported("regex construct {} (at offset {}) is not supported", what, i);
  };
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return invalid_argument("pattern ends with a lone backslash");
      const char d = p[i + 1];
      switch (d) {
        case 's':
          out += in_class ? std::string(kSpaceBody) : fmt::format("[{}]", kSpaceBody);
          i += 2;
          continue;
        case 'S':
          if (in_class) return unsupported_at("\\S inside a character class");
          out += fmt::format("[^{}]", kSpaceBody);
          i += 2;
          continue;
        case 'h':
          out += in_class ? std::string(kHexBody) : fmt::format("[{}]", kHexBody);
          i += 2;
          continue;
        case 'H':
          if (in_class) return unsupported_at("\\H inside a character class");
          out += fmt::format("[^{}]", kHexBody);
          i += 2;
          continue;
        case 'w':
          out += in_class ? std::string(kWordBody) : fmt::format("[{}]", kWordBody);
          i += 2;
          continue;
        case 'W':
          if (in_class) return unsupported_at("\\W inside a character class");
          out += fmt::format("[^{}]", kWordBody);
          i += 2;
          continue;
        case 'b':
        case 'B':
          if (in_class) {  // [\b] is a backspace in both engines
            out += "\\x{8}";
          } else if (d == 'b') {
            out += fmt::format("(?:(?<=[{0}])(?![{0}])|(?<![{0}])(?=[{0}]))", kWordBody);
          } else {
            out += fmt::format("(?:(?<=[{0}])(?=[{0}])|(?<![{0}])(?![{0}]))", kWordBody);
          }
          i += 2;
          continue;
        case 'v':  // Oniguruma: vertical tab; PCRE2: any vertical space
          out += "\\x{B}";
          i += 2;
          continue;
        case 'V': case 'O': case 'y': case 'Y':
          return unsupported_at(fmt::format("\\{}", d));
        case 'p':
        case 'P':
        case 'x':
          if (i + 2 < p.size() && p[i + 2] == '{') {
            out.append(p.substr(i, 2));
            PG_ASSIGN_OR_RETURN(i, copy_braced(p, i + 2, out));
            continue;
          }
          break;
        default:
          break;
      }
      // Any other escape means the same in both engines: copy it (the escaped character may be
      // a multi-byte UTF-8 sequence).
      const size_t n = 1 + utf8_len(static_cast<unsigned char>(d));
      out.append(p.substr(i, n));
      i += n;
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX bracket [:alpha:]
          const size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) return invalid_argument("unterminated POSIX bracket at offset {}", i);
          out.append(p.substr(i, close + 2 - i));
          i = close + 2;
          continue;
        }
        return unsupported_at("nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') return unsupported_at("class intersection &&");
      if (c == ']') in_class = false;
      out.push_back(c);
      ++i;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out.push_back(c);
      ++i;
      if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
      if (i < p.size() && p[i] == ']') out.push_back(p[i++]);  // leading ']' is literal
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      const char e = p[i + 2];
      if (e == '~') return unsupported_at("absent operator (?~");
      // Inline options (?imx-imx) / (?imx-imx:...): Oniguruma's m is dot-all (PCRE2 s).
      size_t j = i + 2;
      while (j < p.size() && std::string_view("imxWDSPy-").find(p[j]) != std::string_view::npos) ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out += "(?";
        for (size_t k = i + 2; k < j; ++k) {
          const char o = p[k];
          if (o == 'm') {
            out.push_back('s');
          } else if (o == 'i' || o == 'x' || o == '-') {
            out.push_back(o);
          } else {
            return unsupported_at(fmt::format("inline option '{}'", o));
          }
        }
        i = j;
        continue;
      }
    }
    out.push_back(c);
    ++i;
  }
  if (in_class) return invalid_argument("unterminated character class");
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern, RegexSyntax syntax) {
  std::string translated;
  uint32_t options = PCRE2_UTF;
  if (syntax == RegexSyntax::kLiteral) {
    translated = std::string(pattern);
    options |= PCRE2_LITERAL;  // UCP is not allowed with LITERAL, and means nothing there
  } else {
    options |= PCRE2_UCP;
    auto t = translate_oniguruma(pattern);
    if (!t.ok()) return t.status().with_context(fmt::format("regex '{}'", pattern));
    translated = std::move(t).value();
    // Oniguruma's ^ and $ are line anchors that only know '\n'.
    options |= PCRE2_MULTILINE;
  }
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  if (cc == nullptr) return internal_error("out of memory creating a PCRE2 compile context");
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                                   &err_offset, cc);
  pcre2_compile_context_free(cc);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return invalid_argument("regex '{}' does not compile (as PCRE2 '{}'): {} at offset {}", pattern, translated,
                            reinterpret_cast<const char*>(msg), err_offset);
  }
  Regex r;
  r.pattern_ = std::string(pattern);
  r.code_ = std::shared_ptr<pcre2_real_code_8>(code, [](pcre2_code* c) { pcre2_code_free(c); });
  r.jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // interpreter fallback without JIT
  return r;
}

int Regex::find(RegexMatchState& state, std::string_view subject, size_t start, size_t* begin, size_t* end) const {
  static const char kEmpty[1] = {0};
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.empty() ? kEmpty : subject.data());
  const int rc = jit_ ? pcre2_jit_match(code_.get(), s, subject.size(), start, PCRE2_NO_UTF_CHECK,
                                        state.match_data_, state.context_)
                      : pcre2_match(code_.get(), s, subject.size(), start, PCRE2_NO_UTF_CHECK, state.match_data_,
                                    state.context_);
  if (rc == PCRE2_ERROR_NOMATCH) return 0;
  if (rc < 0) return rc;
  // rc == 0 only says the ovector holds fewer pairs than the pattern has groups; pair 0 is set.
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.match_data_);
  *begin = ov[0];
  *end = ov[1] < ov[0] ? ov[0] : ov[1];  // \K inside a lookahead can report end < begin
  return 1;
}

Status Regex::error_status(int code, std::string_view pattern) {
  PCRE2_UCHAR msg[256];
  pcre2_get_error_message(code, msg, sizeof(msg));
  return internal_error("matching regex '{}' failed: {}", pattern, reinterpret_cast<const char*>(msg));
}

RegexMatchState::RegexMatchState() {
  match_data_ = pcre2_match_data_create(1, nullptr);
  context_ = pcre2_match_context_create(nullptr);
  // JIT frames for long pieces (a megabyte of letters is one \p{L}+ run): start at 32 KiB,
  // grow on demand up to 8 MiB of reserved address space.
  jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  PG_CHECK(match_data_ != nullptr && context_ != nullptr, "out of memory creating PCRE2 match state");
  if (jit_stack_ != nullptr) pcre2_jit_stack_assign(context_, nullptr, jit_stack_);
}

RegexMatchState::~RegexMatchState() {
  if (jit_stack_ != nullptr) pcre2_jit_stack_free(jit_stack_);
  if (context_ != nullptr) pcre2_match_context_free(context_);
  if (match_data_ != nullptr) pcre2_match_data_free(match_data_);
}

}  // namespace pg
