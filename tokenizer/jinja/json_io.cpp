// JSON in and out: context JSON -> template values, and Python's json.dumps (the encoder
// transformers' tojson filter calls) byte for byte: separators, indent, ensure_ascii, sort_keys,
// float repr, NaN/Infinity.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/py_text.h"
#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {
namespace {

void quote(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  char buf[16];
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
      continue;
    }
    if (!ensure_ascii) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    const char32_t cp = py::next_cp(s, i);
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
    }
    out += buf;
  }
  out.push_back('"');
}

std::string float_json(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(d);
}

class Dumper {
 public:
  Dumper(const DumpOptions& o, std::string& out, Pos pos) : o_(o), out_(out), pos_(pos) {}

  Status dump(const Value& v, int level) {
    if (level > kMaxValueDepth) return rt_error(pos_, "ValueError: Circular reference detected");
    if (out_.size() > o_.max_bytes)
      return resource_exhausted("template error at {}:{}: tojson output exceeds max_output_bytes", pos_.line, pos_.col);
    switch (v.kind()) {
      case Kind::kNone: out_ += "null"; return ok_status();
      case Kind::kBool: out_ += v.as_bool() ? "true" : "false"; return ok_status();
      case Kind::kInt: out_ += std::to_string(v.as_int()); return ok_status();
      case Kind::kFloat: out_ += float_json(v.as_double()); return ok_status();
      case Kind::kStr: quote(out_, v.sv(), o_.ensure_ascii); return ok_status();
      case Kind::kList: {
        const ListObj& l = v.as_list();
        if (l.kind != ListKind::kList && l.kind != ListKind::kTuple) break;
        if (l.items.empty()) {
          out_ += "[]";
          return ok_status();
        }
        out_ += "[";
        newline(level + 1);
        for (size_t i = 0; i < l.items.size(); ++i) {
          if (i > 0) {
            out_ += o_.item_sep;
            newline(level + 1);
          }
          PG_TRY(dump(l.items[i], level + 1));
        }
        newline(level);
        out_ += "]";
        return ok_status();
      }
      case Kind::kDict: return dump_dict(v.as_dict(), level);
      default: break;
    }
    return rt_error(pos_, "TypeError: Object of type {} is not JSON serializable", type_name(v));
  }

 private:
  void newline(int level) {
    if (!o_.indent) return;
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *o_.indent;
  }

  Status dump_dict(const DictObj& d, int level) {
    if (d.items.empty()) {
      out_ += "{}";
      return ok_status();
    }
    std::vector<const std::pair<Value, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (o_.sort_keys) {
      // sorted(dct.items()): keys are distinct, so the key order decides. Insertion sort on a
      // consistent comparison; a TypeError (mixed key types) aborts it.
      for (size_t i = 1; i < items.size(); ++i) {
        for (size_t j = i; j > 0; --j) {
          auto lt = py_lt(items[j]->first, items[j - 1]->first, pos_);
          if (!lt.ok()) return lt.status();
          if (!*lt) break;
          std::swap(items[j], items[j - 1]);
        }
      }
    }
    out_ += "{";
    newline(level + 1);
    bool first = true;
    for (const auto* kv : items) {
      if (!first) {
        out_ += o_.item_sep;
        newline(level + 1);
      }
      first = false;
      const Value& k = kv->first;
      switch (k.kind()) {
        case Kind::kStr: quote(out_, k.sv(), o_.ensure_ascii); break;
        case Kind::kNone: out_ += "\"null\""; break;
        case Kind::kBool: out_ += k.as_bool() ? "\"true\"" : "\"false\""; break;
        case Kind::kInt: out_ += "\"" + std::to_string(k.as_int()) + "\""; break;
        case Kind::kFloat: out_ += "\"" + float_json(k.as_double()) + "\""; break;
        default: return rt_error(pos_, "TypeError: keys must be str, int, float, bool or None, not {}", type_name(k));
      }
      out_ += o_.key_sep;
      PG_TRY(dump(kv->second, level + 1));
    }
    newline(level);
    out_ += "}";
    return ok_status();
  }

  const DumpOptions& o_;
  std::string& out_;
  Pos pos_;
};

}  // namespace

Status json_dump(const Value& v, const DumpOptions& opts, std::string& out, Pos pos) {
  Dumper d(opts, out, pos);
  return d.dump(v, 0);
}

template <typename Json>
Result<Value> from_json(const Json& j, bool literal, int depth) {
  if (depth > kMaxValueDepth)
    return invalid_argument("template context is nested deeper than {} levels", kMaxValueDepth);
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::floating(static_cast<double>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string: return Value::str(j.template get_ref<const std::string&>(), literal);
    case nlohmann::json::value_t::array: {
      auto l = std::make_shared<ListObj>();
      l->items.reserve(j.size());
      int d = 0;
      for (const auto& e : j) {
        PG_ASSIGN_OR_RETURN(Value v, from_json(e, literal, depth + 1));
        d = std::max(d, value_depth(v));
        l->items.push_back(std::move(v));
      }
      l->depth = d + 1;
      return Value(ListP(std::move(l)));
    }
    case nlohmann::json::value_t::object: {
      auto o = std::make_shared<DictObj>();
      o->items.reserve(j.size());
      int d = 0;
      for (auto it = j.begin(); it != j.end(); ++it) {
        PG_ASSIGN_OR_RETURN(Value v, from_json(it.value(), literal, depth + 1));
        d = std::max(d, value_depth(v));
        const std::string key = "s" + it.key();
        auto found = o->index.find(key);
        if (found != o->index.end()) {
          o->items[found->second].second = std::move(v);
          continue;
        }
        o->index.emplace(key, o->items.size());
        o->items.emplace_back(Value::str(it.key(), literal), std::move(v));
      }
      o->depth = d + 1;
      return Value(DictP(std::move(o)));
    }
    default: return invalid_argument("template context holds a value JSON cannot express (binary)");
  }
}

template Result<Value> from_json<nlohmann::json>(const nlohmann::json&, bool, int);
template Result<Value> from_json<nlohmann::ordered_json>(const nlohmann::ordered_json&, bool, int);

}  // namespace pg::jinja
