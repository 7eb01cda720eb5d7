// Filter functions shared between filters.cpp (the table) and seq_filters.cpp; internal to
// pg_jinja. Every filter takes (interpreter, input value, call arguments, position).
#pragma once

#include <vector>

#include "tokenizer/jinja/runtime.h"

namespace pg::jinja {

// soft_str(v): strings keep their provenance, anything else prints as data.
Result<Value> soft_str(Interp& in, const Value& v, Pos pos);
// A single-pass iterator (what Jinja's generator-returning filters give).
Result<Value> iterator_of(Interp& in, std::vector<Value> items, Pos pos);
// make_attrgetter: "a.b.0" walks getitem (falling back to getattr); digit parts index. A
// non-None dflt replaces an Undefined result.
Result<Value> get_attribute(Interp& in, const Value& item, const Value& attribute, const Value* dflt, Pos pos);
// An optional integer argument (dflt when absent).
Result<int64_t> int_arg(const Value* v, int64_t dflt, std::string_view what, Pos pos);

#define PG_JINJA_FILTER(name) Result<Value> name(Interp& in, const Value& v, const CallArgs& args, Pos pos)
PG_JINJA_FILTER(f_batch);
PG_JINJA_FILTER(f_dictsort);
PG_JINJA_FILTER(f_map);
PG_JINJA_FILTER(f_select);
PG_JINJA_FILTER(f_reject);
PG_JINJA_FILTER(f_selectattr);
PG_JINJA_FILTER(f_rejectattr);
PG_JINJA_FILTER(f_max);
PG_JINJA_FILTER(f_min);
PG_JINJA_FILTER(f_slice);
PG_JINJA_FILTER(f_sort);
PG_JINJA_FILTER(f_string);
PG_JINJA_FILTER(f_sum);
PG_JINJA_FILTER(f_unique);
#undef PG_JINJA_FILTER

}  // namespace pg::jinja
