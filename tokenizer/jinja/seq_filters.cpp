// Jinja2's sequence filters: map, select/reject(attr), sort, dictsort, unique, min/max, sum,
// batch, slice. Sorting is stable and compares keys as Python does (sort: lists of keys).
#include <algorithm>
#include <unordered_set>

#include "tokenizer/jinja/filter_fns.h"
#include "tokenizer/jinja/parser.h"
#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

// ignore_case(): lower-case strings for case-insensitive sorting/comparison.
// The copy is charged before it is made, so that a budget spent on huge keys stops the filter
// before it lowers one more (each copy is charged again as it becomes a value).
static Result<Value> fold(Interp& in, const Value& v, bool case_sensitive, Pos pos) {
  if (case_sensitive || !v.is_str()) return v;
  PG_TRY(in.charge_bytes(v.sv().size()));
  return in.make_str(py::lower(v.sv()), false, pos);  // a tracked copy, as Python makes one per key
}

// Python list comparison of sort keys: the first pair that is not == decides with <.
static Result<bool> keys_lt(const std::vector<Value>& a, const std::vector<Value>& b, Pos pos, CompareWork* work) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (py_eq(a[i], b[i], 0, work)) continue;
    return py_lt(a[i], b[i], pos, 0, work);
  }
  return a.size() < b.size();
}

// Stable merge sort whose comparison may fail (Python's sorted() raising TypeError). Keys are
// lists (sort's make_multi_attrgetter) when list_keys, else compared directly (dictsort).
static Status sort_values(Interp& in, std::vector<std::vector<Value>>& keys, std::vector<size_t>& order, bool reverse,
                          bool list_keys, Pos pos) {
  Status err;
  CompareWork work = in.compare_work();
  auto less = [&](size_t x, size_t y) -> bool {
    if (!err.ok() || work.over()) return false;
    if (reverse) std::swap(x, y);
    auto r = list_keys ? keys_lt(keys[x], keys[y], pos, &work) : py_lt(keys[x][0], keys[y][0], pos, 0, &work);
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  };
  std::vector<size_t> tmp(order.size());
  for (size_t width = 1; width < order.size(); width *= 2) {
    for (size_t lo = 0; lo < order.size(); lo += 2 * width) {
      const size_t mid = std::min(lo + width, order.size()), hi = std::min(lo + 2 * width, order.size());
      size_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = less(order[j], order[i]) ? order[j++] : order[i++];
      while (i < mid) tmp[k++] = order[i++];
      while (j < hi) tmp[k++] = order[j++];
    }
    order.swap(tmp);
  }
  PG_TRY(err);
  return in.charge(work);
}

Result<Value> f_batch(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"linecount", "fill_with"}, 1, a, "batch", pos));
  PG_ASSIGN_OR_RETURN(int64_t n, int_arg(a[0], 0, "linecount", pos));
  if (n <= 0) return rt_error(pos, "batch() linecount must be positive (Jinja2 would loop forever)");
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); i += static_cast<size_t>(n)) {
    std::vector<Value> row(
        items.begin() + static_cast<std::ptrdiff_t>(i),
        items.begin() + static_cast<std::ptrdiff_t>(std::min(items.size(), i + static_cast<size_t>(n))));
    if (a[1] != nullptr && !a[1]->is_none() && row.size() < static_cast<size_t>(n)) {
      const size_t pad = static_cast<size_t>(n) - row.size();
      if (pad > in.options().limits.max_memory_bytes / sizeof(Value))
        return resource_exhausted("template error at {}:{}: batch() padding exceeds max_memory_bytes", pos.line,
                                  pos.col);
      PG_TRY(in.step(pad / 8 + 1));
      row.insert(row.end(), pad, *a[1]);
    }
    PG_ASSIGN_OR_RETURN(Value r, in.make_list(std::move(row), ListKind::kList, pos));
    out.push_back(std::move(r));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_dictsort(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "by", "reverse"}, 0, a, "dictsort", pos));
  if (!v.is_dict()) return rt_error(pos, "dictsort: '{}' object has no attribute 'items'", type_name(v));
  const bool cs = a[0] != nullptr && truthy(*a[0]);
  int which = 0;
  if (a[1] != nullptr) {
    const std::string by = to_str(*a[1], in.str_limit());
    if (by == "value")
      which = 1;
    else if (by != "key")
      return rt_error(pos, "You can only sort by either \"key\" or \"value\"");
  }
  const auto& items = v.as_dict().items;
  std::vector<std::vector<Value>> keys;
  std::vector<size_t> order;
  for (size_t i = 0; i < items.size(); ++i) {
    PG_ASSIGN_OR_RETURN(Value key, fold(in, which == 0 ? items[i].first : items[i].second, cs, pos));
    keys.push_back({std::move(key)});
    order.push_back(i);
  }
  PG_TRY(in.step(items.size() * 4 + 1));
  PG_TRY(sort_values(in, keys, order, a[2] != nullptr && truthy(*a[2]), false, pos));
  std::vector<Value> out;
  for (size_t i : order) {
    PG_ASSIGN_OR_RETURN(Value pair, in.make_list({items[i].first, items[i].second}, ListKind::kTuple, pos));
    out.push_back(std::move(pair));
  }
  return in.make_list(std::move(out), ListKind::kList, pos);
}

Result<Value> f_map(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  if (!truthy(v)) return iterator_of(in, {}, pos);
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  const Value* attribute = nullptr;
  const Value* dflt = nullptr;
  for (const auto& [k, x] : args.kw) {
    if (k == "attribute")
      attribute = &x;
    else if (k == "default")
      dflt = &x;
  }
  if (args.pos.empty() && attribute != nullptr) {
    for (const auto& [k, x] : args.kw)
      if (k != "attribute" && k != "default") return rt_error(pos, "Unexpected keyword argument '{}'", k);
    for (const Value& item : items) {
      PG_ASSIGN_OR_RETURN(Value r, get_attribute(in, item, *attribute, dflt, pos));
      out.push_back(std::move(r));
    }
    return iterator_of(in, std::move(out), pos);
  }
  if (args.pos.empty()) return rt_error(pos, "map requires a filter argument");
  const std::string name = to_str(args.pos[0], in.str_limit());
  const int fn = find_filter(name);
  if (fn < 0) return rt_error(pos, "No filter named '{}'.", name);
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const Value& item : items) {
    PG_ASSIGN_OR_RETURN(Value r, in.apply_filter(fn, item, rest, pos));
    out.push_back(std::move(r));
  }
  return iterator_of(in, std::move(out), pos);
}

// select / reject / selectattr / rejectattr (jinja2.filters.select_or_reject).
static Result<Value> select_or_reject(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool select,
                                      bool attr) {
  if (!truthy(v)) return iterator_of(in, {}, pos);
  size_t off = 0;
  const Value* attribute = nullptr;
  if (attr) {
    if (args.pos.empty()) return rt_error(pos, "Missing parameter for attribute name");
    attribute = &args.pos[0];
    off = 1;
  }
  int fn = -1;
  CallArgs rest;
  if (args.pos.size() > off) {
    const std::string name = to_str(args.pos[off], in.str_limit());
    fn = find_test(name);
    if (fn < 0) return rt_error(pos, "No test named '{}'.", name);
    rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off + 1), args.pos.end());
    rest.kw = args.kw;
  }
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  std::vector<Value> out;
  for (Value& item : items) {
    Value subject = item;
    if (attribute != nullptr) {
      PG_ASSIGN_OR_RETURN(subject, get_attribute(in, item, *attribute, nullptr, pos));
    }
    bool keep;
    if (fn >= 0) {
      PG_ASSIGN_OR_RETURN(keep, in.apply_test(fn, subject, rest, pos));
    } else {
      keep = truthy(subject);
    }
    if (keep == select) out.push_back(std::move(item));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_select(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return select_or_reject(in, v, a, p, true, false);
}
Result<Value> f_reject(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return select_or_reject(in, v, a, p, false, false);
}
Result<Value> f_selectattr(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return select_or_reject(in, v, a, p, true, true);
}
Result<Value> f_rejectattr(Interp& in, const Value& v, const CallArgs& a, Pos p) {
  return select_or_reject(in, v, a, p, false, true);
}

// min / max / unique / sort share the key function: attribute lookup, then case folding.
static Result<std::vector<Value>> sort_keys(Interp& in, const std::vector<Value>& items, const Value* attribute,
                                            bool cs, Pos pos) {
  std::vector<Value> keys;
  for (const Value& item : items) {
    Value k = item;
    if (attribute != nullptr && !attribute->is_none()) {
      PG_ASSIGN_OR_RETURN(k, get_attribute(in, item, *attribute, nullptr, pos));
    }
    PG_ASSIGN_OR_RETURN(Value folded, fold(in, k, cs, pos));
    keys.push_back(std::move(folded));
  }
  return keys;
}

static Result<Value> min_max(Interp& in, const Value& v, const CallArgs& args, Pos pos, bool is_max) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "attribute"}, 0, a, is_max ? "max" : "min", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  PG_ASSIGN_OR_RETURN(std::vector<Value> keys, sort_keys(in, items, a[1], a[0] != nullptr && truthy(*a[0]), pos));
  CompareWork work = in.compare_work();
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    PG_ASSIGN_OR_RETURN(bool better,
                        is_max ? py_lt(keys[best], keys[i], pos, 0, &work) : py_lt(keys[i], keys[best], pos, 0, &work));
    if (work.over()) break;
    if (better) best = i;
  }
  PG_TRY(in.charge(work));
  return items[best];
}

Result<Value> f_max(Interp& in, const Value& v, const CallArgs& a, Pos p) { return min_max(in, v, a, p, true); }
Result<Value> f_min(Interp& in, const Value& v, const CallArgs& a, Pos p) { return min_max(in, v, a, p, false); }

Result<Value> f_slice(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"slices", "fill_with"}, 1, a, "slice", pos));
  PG_ASSIGN_OR_RETURN(int64_t slices, int_arg(a[0], 0, "slices", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> seq, in.iterate(v, pos));
  if (slices == 0) return rt_error(pos, "integer division or modulo by zero");
  if (slices < 0) return iterator_of(in, {}, pos);
  PG_TRY(in.step(static_cast<uint64_t>(slices)));
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, extra = length % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t k = 0; k < slices; ++k) {
    const int64_t start = offset + k * per;
    if (k < extra) ++offset;
    const int64_t end = offset + (k + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (a[1] != nullptr && !a[1]->is_none() && k >= extra) tmp.push_back(*a[1]);
    PG_ASSIGN_OR_RETURN(Value l, in.make_list(std::move(tmp), ListKind::kList, pos));
    out.push_back(std::move(l));
  }
  return iterator_of(in, std::move(out), pos);
}

Result<Value> f_sort(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"reverse", "case_sensitive", "attribute"}, 0, a, "sort", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  // make_multi_attrgetter: "a,b.c" sorts by several keys; each item's key is a list.
  std::vector<Value> attrs;
  if (a[2] != nullptr && a[2]->is_str()) {
    const std::string& spec = a[2]->sv();
    for (size_t b = 0;;) {
      const size_t e = spec.find(',', b);
      attrs.push_back(Value::str(spec.substr(b, e == std::string::npos ? std::string::npos : e - b), false));
      if (e == std::string::npos) break;
      b = e + 1;
    }
  } else if (a[2] != nullptr && !a[2]->is_none()) {
    attrs.push_back(*a[2]);
  }
  const bool cs = a[1] != nullptr && truthy(*a[1]);
  std::vector<std::vector<Value>> keys;
  for (const Value& item : items) {
    std::vector<Value> k;
    if (attrs.empty()) {
      PG_ASSIGN_OR_RETURN(Value folded, fold(in, item, cs, pos));
      k.push_back(std::move(folded));
    }
    for (const Value& attr : attrs) {
      PG_ASSIGN_OR_RETURN(Value x, get_attribute(in, item, attr, nullptr, pos));
      PG_ASSIGN_OR_RETURN(Value folded, fold(in, x, cs, pos));
      k.push_back(std::move(folded));
    }
    keys.push_back(std::move(k));
  }
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  PG_TRY(in.step(items.size() * 4 + 1));
  PG_TRY(sort_values(in, keys, order, a[0] != nullptr && truthy(*a[0]), true, pos));
  std::vector<Value> out;
  for (size_t i : order) out.push_back(items[i]);
  return in.make_list(std::move(out), ListKind::kList, pos);
}

Result<Value> f_string(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {}, 0, a, "string", pos));
  return soft_str(in, v, pos);
}

Result<Value> f_sum(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"attribute", "start"}, 0, a, "sum", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  Value acc = a[1] != nullptr ? *a[1] : Value::integer(0);
  for (const Value& item : items) {
    Value x = item;
    if (a[0] != nullptr) {
      PG_ASSIGN_OR_RETURN(x, get_attribute(in, item, *a[0], nullptr, pos));
    }
    PG_ASSIGN_OR_RETURN(acc, binary_op(in, BinOp::kAdd, acc, x, pos));
  }
  return acc;
}

Result<Value> f_unique(Interp& in, const Value& v, const CallArgs& args, Pos pos) {
  std::vector<const Value*> a;
  PG_TRY(bind_args(args, {"case_sensitive", "attribute"}, 0, a, "unique", pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> items, in.iterate(v, pos));
  PG_ASSIGN_OR_RETURN(std::vector<Value> keys, sort_keys(in, items, a[1], a[0] != nullptr && truthy(*a[0]), pos));
  std::unordered_set<std::string> seen;
  std::vector<Value> out;
  for (size_t i = 0; i < items.size(); ++i) {
    auto k = hash_key(keys[i]);
    if (!k) return rt_error(pos, "unhashable type: '{}'", type_name(keys[i]));
    PG_TRY(in.charge_bytes(k->size()));
    if (!seen.insert(std::move(*k)).second) continue;
    out.push_back(items[i]);
  }
  return iterator_of(in, std::move(out), pos);
}

}  // namespace pg::jinja
