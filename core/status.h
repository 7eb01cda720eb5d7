// Status and Result<T>: how library code reports recoverable errors (it never throws).
// A Status carries a code (mapped to HTTP status / exit codes at the boundary) and a
// message that says what is wrong and, where it helps, what would be right.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pg {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input from a user: request field, flag, prompt
  kNotFound,            // a file, tensor or key that should exist does not
  kDataLoss,            // a file exists but is malformed (truncated, bad header...)
  kUnsupported,         // well-formed but not something we implement (model_type, dtype...)
  kOutOfRange,          // e.g. prompt longer than the context
  kResourceExhausted,   // queue full, KV blocks exhausted, limits hit
  kFailedPrecondition,  // called in the wrong state
  kCancelled,
  kIoError,
  kInternal,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NotFound: tensor 'x' is missing from 'model.safetensors'"
  std::string to_string() const;

  // Prefix context onto the message: "loading model.safetensors: <message>".
  Status with_context(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, fmt::format("{}: {}", context, message_));
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return {}; }

template <typename... Args>
Status make_error(StatusCode code, fmt::format_string<Args...> f, Args&&... args) {
  return Status(code, fmt::format(f, std::forward<Args>(args)...));
}
#define PG_DEFINE_ERROR_FN(fn, code)                                            \
  template <typename... Args>                                                   \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {                    \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }
PG_DEFINE_ERROR_FN(invalid_argument, kInvalidArgument)
PG_DEFINE_ERROR_FN(not_found, kNotFound)
PG_DEFINE_ERROR_FN(data_loss, kDataLoss)
PG_DEFINE_ERROR_FN(unsupported, kUnsupported)
PG_DEFINE_ERROR_FN(out_of_range, kOutOfRange)
PG_DEFINE_ERROR_FN(resource_exhausted, kResourceExhausted)
PG_DEFINE_ERROR_FN(failed_precondition, kFailedPrecondition)
PG_DEFINE_ERROR_FN(io_error, kIoError)
PG_DEFINE_ERROR_FN(internal_error, kInternal)
#undef PG_DEFINE_ERROR_FN

// Result<T>: a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from an ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace pg

#define PG_CONCAT_INNER(a, b) a##b
#define PG_CONCAT(a, b) PG_CONCAT_INNER(a, b)

// Return the Status of `expr` from the enclosing function if it is not ok.
#define PG_TRY(expr)                          \
  do {                                        \
    ::pg::Status _pg_st = (expr);             \
    if (!_pg_st.ok()) return _pg_st;          \
  } while (0)

// `PG_ASSIGN_OR_RETURN(auto x, make_x());` binds the value or returns the error.
#define PG_ASSIGN_OR_RETURN(lhs, expr) PG_ASSIGN_OR_RETURN_IMPL(PG_CONCAT(_pg_res_, __LINE__), lhs, expr)
#define PG_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
