// BPE model: vocab/merges parsing, the merge table (open addressing on id pairs), and merge_word
// with a min-heap of candidate merges ordered by (rank, position), as HF `tokenizers` word.rs.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.h"

namespace pg {
namespace {

using json = nlohmann::json;

uint64_t pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }

size_t hash_key(uint64_t key, size_t mask) { return size_t((key * 0x9E3779B97F4A7C15ull) >> 17) & mask; }

bool heap_after(const BpeScratch::Candidate& a, const BpeScratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

Result<int32_t> lookup(const StringIdMap& vocab, std::string_view token, const std::string& where) {
  const auto it = vocab.find(token);
  if (it == vocab.end()) return data_loss("{}: token '{}' is not in model.vocab", where, token);
  return it->second;
}

}  // namespace

const BpeModel::MergeSlot* BpeModel::find_merge(int32_t left, int32_t right) const {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t i = hash_key(key, mask);; i = (i + 1) & mask) {
    const MergeSlot& s = merges_[i];
    if (s.key == key) return &s;
    if (s.key == kEmpty) return nullptr;
  }
}

void BpeModel::insert_merge(int32_t left, int32_t right, uint32_t rank, int32_t new_id) {
  const uint64_t key = pair_key(left, right);
  const size_t mask = merges_.size() - 1;
  for (size_t i = hash_key(key, mask);; i = (i + 1) & mask) {
    MergeSlot& s = merges_[i];
    if (s.key == kEmpty) ++n_merges_;
    if (s.key == kEmpty || s.key == key) {  // a repeated pair keeps its last rank, as HF's HashMap
      s = {key, rank, new_id};
      return;
    }
  }
}

Result<BpeModel> BpeModel::from_json(const json& j) {
  if (!j.is_object()) return data_loss("model must be an object");
  const auto type = j.find("type");
  if (type != j.end() && !(type->is_string() && type->get_ref<const std::string&>() == "BPE"))
    return unsupported("model.type {} is not supported (only BPE)", type->dump());
  auto is_unset = [&](const char* key) {
    const auto it = j.find(key);
    return it == j.end() || it->is_null() || (it->is_string() && it->get_ref<const std::string&>().empty());
  };
  if (const auto d = j.find("dropout"); d != j.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    return unsupported("model.dropout {} is not supported (BPE dropout is for training)", d->dump());
  if (!is_unset("continuing_subword_prefix")) return unsupported("model.continuing_subword_prefix is not supported");
  if (!is_unset("end_of_word_suffix")) return unsupported("model.end_of_word_suffix is not supported");
  if (const auto bf = j.find("byte_fallback"); bf != j.end() && bf->is_boolean() && bf->get<bool>())
    return unsupported("model.byte_fallback=true is not supported (byte-level BPE needs no fallback)");

  BpeModel m;
  const auto vocab = j.find("vocab");
  if (vocab == j.end() || !vocab->is_object()) return data_loss("model.vocab must be an object");
  m.vocab_.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      return data_loss("model.vocab['{}'] must be an id in [0, 2^31), not {}", token, id.dump());
    m.vocab_.emplace(token, int32_t(id.get<int64_t>()));
  }
  for (int b = 0; b < 256; ++b) {
    std::string spelled;
    byte_level::append_encoded(std::string_view(reinterpret_cast<const char*>(&b), 1), spelled);
    const auto it = m.vocab_.find(spelled);
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }
  if (const auto unk = j.find("unk_token"); unk != j.end() && unk->is_string()) {
    PG_ASSIGN_OR_RETURN(m.unk_id_, lookup(m.vocab_, unk->get_ref<const std::string&>(), "model.unk_token"));
  }
  if (const auto f = j.find("fuse_unk"); f != j.end() && f->is_boolean()) m.fuse_unk_ = f->get<bool>();
  if (const auto f = j.find("ignore_merges"); f != j.end() && f->is_boolean()) m.ignore_merges_ = f->get<bool>();

  const auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) return data_loss("model.merges must be an array");
  size_t cap = 16;
  while (cap < 2 * merges->size()) cap *= 2;  // load factor <= 1/2
  m.merges_.assign(cap, MergeSlot{});
  std::string left, right;
  for (size_t i = 0; i < merges->size(); ++i) {
    const json& e = (*merges)[i];
    const std::string where = fmt::format("model.merges[{}]", i);
    if (e.is_string()) {  // "a b": tokens never contain ' ' in the byte-level alphabet
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos || sp == 0 || sp + 1 == s.size())
        return data_loss("{}: '{}' is not two tokens separated by one space", where, s);
      left.assign(s, 0, sp);
      right.assign(s, sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      left = e[0].get<std::string>();
      right = e[1].get<std::string>();
    } else {
      return data_loss("{} must be a string \"a b\" or a pair [\"a\", \"b\"], not {}", where, e.dump());
    }
    PG_ASSIGN_OR_RETURN(const int32_t a, lookup(m.vocab_, left, where));
    PG_ASSIGN_OR_RETURN(const int32_t b, lookup(m.vocab_, right, where));
    PG_ASSIGN_OR_RETURN(const int32_t merged, lookup(m.vocab_, left + right, where));
    m.insert_merge(a, b, uint32_t(i), merged);
  }
  return m;
}

void BpeModel::merge_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    scratch.spelled.clear();
    byte_level::append_encoded(word, scratch.spelled);
    const auto it = vocab_.find(scratch.spelled);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  auto& syms = scratch.symbols;
  syms.clear();
  for (const char c : word) {
    const int32_t id = byte_ids_[uint8_t(c)];
    if (id >= 0) {
      syms.push_back({id, 0, 0, 1});
    } else if (unk_id_ >= 0) {
      if (fuse_unk_ && !syms.empty() && syms.back().id == unk_id_) {
        syms.back().n_bytes += 1;
      } else {
        syms.push_back({unk_id_, 0, 0, 1});
      }
    }  // else: dropped, as HF BPE does for a symbol missing from the vocab without unk_token
  }
  const int32_t n = int32_t(syms.size());
  for (int32_t k = 0; k < n; ++k) {
    syms[k].prev = k - 1;
    syms[k].next = k + 1 < n ? k + 1 : -1;
  }
  auto& heap = scratch.heap;
  heap.clear();
  for (int32_t k = 0; k + 1 < n; ++k) {
    if (const MergeSlot* m = find_merge(syms[k].id, syms[k + 1].id)) heap.push_back({m->rank, k, m->new_id});
  }
  std::make_heap(heap.begin(), heap.end(), heap_after);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), heap_after);
    const BpeScratch::Candidate top = heap.back();
    heap.pop_back();
    BpeScratch::Symbol& left = syms[top.pos];
    if (left.n_bytes == 0 || left.next < 0) continue;  // merged away, or now last
    BpeScratch::Symbol& right = syms[left.next];
    const MergeSlot* m = find_merge(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale: a neighbour changed
    left.id = top.new_id;
    left.n_bytes += right.n_bytes;
    right.n_bytes = 0;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeSlot* p = find_merge(syms[left.prev].id, left.id)) {
        heap.push_back({p->rank, left.prev, p->new_id});
        std::push_heap(heap.begin(), heap.end(), heap_after);
      }
    }
    if (left.next >= 0) {
      if (const MergeSlot* q = find_merge(left.id, syms[left.next].id)) {
        heap.push_back({q->rank, top.pos, q->new_id});
        std::push_heap(heap.begin(), heap.end(), heap_after);
      }
    }
  }
  for (int32_t k = n > 0 ? 0 : -1; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

void BpeModel::encode_word(std::string_view word, BpeScratch& scratch, std::vector<int32_t>& out) const {
  if (word.size() == 1 && byte_ids_[uint8_t(word[0])] >= 0) {
    out.push_back(byte_ids_[uint8_t(word[0])]);
    return;
  }
  if (word.size() > BpeScratch::kMaxCachedWordBytes) {
    merge_word(word, scratch, out);
    return;
  }
  if (const auto it = scratch.cache.find(word); it != scratch.cache.end()) {
    const auto* ids = scratch.cache_ids.data() + it->second.offset;
    out.insert(out.end(), ids, ids + it->second.n);
    return;
  }
  const size_t first = out.size();
  merge_word(word, scratch, out);
  if (scratch.cache.size() >= BpeScratch::kMaxCachedWords) {
    scratch.cache.clear();
    scratch.cache_ids.clear();
  }
  const auto offset = uint32_t(scratch.cache_ids.size());
  scratch.cache_ids.insert(scratch.cache_ids.end(), out.begin() + ptrdiff_t(first), out.end());
  scratch.cache.emplace(std::string(word), BpeScratch::CacheEntry{offset, uint32_t(out.size() - first)});
}

}  // namespace pg
