// PCRE2 compilation/matching for tokenizer.json patterns and the Oniguruma -> PCRE2 translation.
// Oniguruma semantics follow its doc/RE (Unicode case): \s = U+0009-000D, U+0085, Zs, Zl, Zp;
// \w = Letter | Mark | Decimal_Number | Connector_Punctuation; \h = hex digit; (?m) = dot-all.
#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace pg {
namespace {

// Unicode White_Space as a class body (Oniguruma's Unicode \s).
constexpr std::string_view kSpaceBody =
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr std::string_view kHexBody = "0-9a-fA-F";

// PCRE2's Unicode tables lag (10.42: Unicode 14); these ranges bring \p{L}, \p{M}, \p{N}, \p{P},
// \p{S} up to the Unicode version of the generator's Node.js, so e.g. the 2022+ emoji are \p{S}
// as in Oniguruma and tokenizers.js.
struct SupplementRange {
  char category;
  uint32_t first, last;  // inclusive
};
constexpr SupplementRange kSupplement[] = {
#include "tokenizer/unicode_supplement.inc"
};

// Class-body text for the supplement of a one-letter category ("" when none).
const std::string& supplement_body_of(char category) {
  static const auto bodies = [] {
    std::array<std::string, 128> b;
    for (const auto& r : kSupplement) {
      b[size_t(r.category)] += r.first == r.last ? fmt::format("\\x{{{:X}}}", r.first)
                                                 : fmt::format("\\x{{{:X}}}-\\x{{{:X}}}", r.first, r.last);
    }
    return b;
  }();
  return bodies[size_t(category) & 127];
}

// Oniguruma's Unicode \w: Letter | Mark | Decimal_Number | Connector_Punctuation.
std::string word_body(bool supplement) {
  return "\\p{L}" + (supplement ? supplement_body_of('L') : std::string()) + "\\p{M}" +
         (supplement ? supplement_body_of('M') : std::string()) + "\\p{Nd}\\p{Pc}";
}

// The one-letter general category a property name stands for, or 0.
char category_letter(std::string_view name) {
  if (name.size() == 1 && std::string_view("LMNPS").find(name[0]) != std::string_view::npos) return name[0];
  if (name == "Letter") return 'L';
  if (name == "Mark") return 'M';
  if (name == "Number") return 'N';
  if (name == "Punctuation") return 'P';
  if (name == "Symbol") return 'S';
  return 0;
}

size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

// Copies a braced escape argument "{...}" starting at p[i] (i at '{'); returns the new index.
Result<size_t> copy_braced(std::string_view p, size_t i, std::string& out) {
  const size_t close = p.find('}', i);
  if (close == std::string_view::npos) return invalid_argument("unterminated '{{' at offset {}", i);
  out.append(p.substr(i, close + 1 - i));
  return close + 1;
}

}  // namespace

Result<std::string> Regex::translate_oniguruma(std::string_view p, bool supplement) {
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
          out += in_class ? word_body(supplement) : fmt::format("[{}]", word_body(supplement));
          i += 2;
          continue;
        case 'W':
          if (in_class) return unsupported_at("\\W inside a character class");
          out += fmt::format("[^{}]", word_body(supplement));
          i += 2;
          continue;
        case 'b':
        case 'B':
          if (in_class) {  // [\b] is a backspace in both engines
            out += "\\x{8}";
          } else if (d == 'b') {
            out += fmt::format("(?:(?<=[{0}])(?![{0}])|(?<![{0}])(?=[{0}]))", word_body(supplement));
          } else {
            out += fmt::format("(?:(?<=[{0}])(?=[{0}])|(?<![{0}])(?![{0}]))", word_body(supplement));
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
        case 'P': {
          // \p{X}, \pX, \P{X}, \p{^X}: add the newer-Unicode supplement of L, M, N, P, S.
          std::string_view name;
          size_t next = i + 3;
          if (i + 2 < p.size() && p[i + 2] == '{') {
            const size_t close = p.find('}', i + 3);
            if (close == std::string_view::npos) return invalid_argument("unterminated '{{' at offset {}", i + 2);
            name = p.substr(i + 3, close - i - 3);
            next = close + 1;
          } else if (i + 2 < p.size()) {
            name = p.substr(i + 2, 1);
          } else {
            return invalid_argument("pattern ends inside \\{}", d);
          }
          bool negated = d == 'P';
          if (name.starts_with('^')) {
            negated = !negated;
            name.remove_prefix(1);
          }
          const char cat = category_letter(name);
          const std::string extra = cat != 0 && supplement ? supplement_body_of(cat) : std::string();
          const std::string prop = fmt::format("\\p{{{}}}", name);
          if (extra.empty() || (negated && in_class)) {
            // A negated property inside a class cannot exclude the supplement: left as PCRE2's.
            out.append(p.substr(i, next - i));
          } else if (in_class) {
            out += prop + extra;
          } else {
            out += (negated ? "[^" : "[") + prop + extra + "]";
          }
          i = next;
          continue;
        }
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

namespace {

Result<pcre2_code*> compile_pcre2(const std::string& translated, uint32_t options, std::string_view original) {
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
    return invalid_argument("regex '{}' does not compile (as PCRE2 '{}'): {} at offset {}", original, translated,
                            reinterpret_cast<const char*>(msg), err_offset);
  }
  return code;
}

std::shared_ptr<pcre2_real_code_8> own(pcre2_code* code) {
  // JIT when the platform has it; pcre2_match interprets otherwise.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::shared_ptr<pcre2_real_code_8>(code, [](pcre2_code* c) { pcre2_code_free(c); });
}

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern, RegexSyntax syntax) {
  Regex r;
  r.pattern_ = std::string(pattern);
  if (syntax == RegexSyntax::kLiteral) {
    // UCP is not allowed with LITERAL, and means nothing there.
    PG_ASSIGN_OR_RETURN(pcre2_code* code, compile_pcre2(r.pattern_, PCRE2_UTF | PCRE2_LITERAL, pattern));
    r.code_ = own(code);
    return r;
  }
  // Oniguruma's ^ and $ are line anchors that only know '\n'.
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  auto plain = translate_oniguruma(pattern, /*supplement=*/false);
  if (!plain.ok()) return plain.status().with_context(fmt::format("regex '{}'", pattern));
  auto full = translate_oniguruma(pattern, /*supplement=*/true);
  if (!full.ok()) return full.status().with_context(fmt::format("regex '{}'", pattern));
  PG_ASSIGN_OR_RETURN(pcre2_code* code, compile_pcre2(*plain, options, pattern));
  r.code_ = own(code);
  if (*full != *plain) {
    PG_ASSIGN_OR_RETURN(pcre2_code* sup, compile_pcre2(*full, options, pattern));
    r.code_supplemented_ = own(sup);
  }
  return r;
}

namespace {

constexpr bool supplement_starts_at_u0800() {
  for (const auto& r : kSupplement)
    if (r.first < 0x800) return false;
  return true;
}
// needs_unicode_supplement skips 1- and 2-byte characters.
static_assert(supplement_starts_at_u0800(), "a supplement range below U+0800");

}  // namespace

bool needs_unicode_supplement(std::string_view text) {
  // All supplement ranges, any category, sorted by first code point.
  static const std::vector<std::pair<uint32_t, uint32_t>> kSorted = [] {
    std::vector<std::pair<uint32_t, uint32_t>> v;
    for (const auto& r : kSupplement) v.emplace_back(r.first, r.last);
    std::sort(v.begin(), v.end());
    return v;
  }();
  for (size_t i = 0; i < text.size(); ++i) {
    if (uint8_t(text[i]) < 0xE0) continue;  // ASCII, continuation bytes, 2-byte leads
    size_t j = i;
    if (utf8::sequence_length(text.substr(i)) == 0) continue;
    const uint32_t cp = utf8::decode(text, j);
    auto it = std::upper_bound(kSorted.begin(), kSorted.end(), std::make_pair(cp, UINT32_MAX));
    if (it != kSorted.begin() && cp <= std::prev(it)->second) return true;
    i = j - 1;
  }
  return false;
}

int Regex::find(RegexMatchState& state, std::string_view subject, size_t start, size_t* begin, size_t* end,
                bool supplement) const {
  static const char kEmpty[1] = {0};
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.empty() ? kEmpty : subject.data());
  pcre2_code* code = supplement && code_supplemented_ ? code_supplemented_.get() : code_.get();
  // pcre2_match runs the JIT code when there is some (and interprets otherwise).
  const int rc = pcre2_match(code, s, subject.size(), start, PCRE2_NO_UTF_CHECK, state.match_data_, state.context_);
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
