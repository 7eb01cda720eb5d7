// Streaming detokenization: append each token's bytes, emit the longest prefix whose UTF-8 is
// decided (maximal-subpart U+FFFD replacement is local, so the stream equals a whole decode).
#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace pg {

Result<std::string> IncrementalDetokenizer::push(int32_t id) {
  PG_ASSIGN_OR_RETURN(const std::string_view bytes, tokenizer_.token_bytes(id));
  std::string out;
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return out;
  pending_.append(bytes);
  const size_t consumed = utf8::append_lossy(pending_, /*final=*/false, out);
  pending_.erase(0, consumed);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  utf8::append_lossy(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace pg
