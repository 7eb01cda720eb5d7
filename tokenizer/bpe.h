// The BPE model of tokenizer.json ("model": {"type": "BPE", vocab, merges}) over the byte-level
// alphabet: a word (one pre-tokenizer piece, raw bytes) becomes ids by applying merges lowest
// rank first, leftmost first on ties — the order HF `tokenizers` BPE::merge_word produces.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace pg {

// Hash for heterogeneous string lookups (find by string_view without building a std::string).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// One thread's reusable BPE buffers and its word -> ids memo.
struct BpeScratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the word; -1 at the ends
    int32_t n_bytes;     // 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t new_id;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string spelled;  // byte-level spelling, for ignore_merges

  // Memo of words already encoded: raw bytes -> [offset, offset + n) in `cache_ids`.
  struct CacheEntry {
    uint32_t offset;
    uint32_t n;
  };
  std::unordered_map<std::string, CacheEntry, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> cache_ids;
  // The memo is dropped when it reaches this many words (bounds memory on adversarial input).
  static constexpr size_t kMaxCachedWords = size_t(1) << 17;
  // Words longer than this are not memoised (they rarely repeat).
  static constexpr size_t kMaxCachedWordBytes = 256;
};

class BpeModel {
 public:
  // `j` is tokenizer.json's "model". Errors name the field ("model.merges[12]: ...").
  static Result<BpeModel> from_json(const nlohmann::json& j);

  // Appends the ids of one word given as raw bytes (the ByteLevel step maps them to symbols).
  void encode_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

  const StringIdMap& vocab() const { return vocab_; }
  int32_t byte_id(uint8_t b) const { return byte_ids_[b]; }
  size_t n_merges() const { return n_merges_; }

 private:
  struct MergeSlot {
    uint64_t key = kEmpty;  // (left id << 32) | right id
    uint32_t rank = 0;
    int32_t new_id = -1;
  };
  static constexpr uint64_t kEmpty = ~uint64_t(0);

  const MergeSlot* find_merge(int32_t left, int32_t right) const;
  void insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t new_id);
  void merge_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const;

  StringIdMap vocab_;
  int32_t byte_ids_[256];  // id of each byte's single-symbol token; -1 when absent
  std::vector<MergeSlot> merges_;  // open addressing, power-of-two size, linear probing
  size_t n_merges_ = 0;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

}  // namespace pg
