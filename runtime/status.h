// Status and Result: how fallible kvtier functions report failure.
//
// A Status is ok or carries one human-readable message that names the thing,
// the value and what to do. No exceptions cross the preload boundary, so every
// fallible function returns one of these. Thread-safety: value types.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <string>
#include <utility>
#include <variant>

namespace kvtier {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string message) { return Status(std::move(message)); }
  // printf-style constructor for messages built from values.
  [[gnu::format(printf, 1, 2)]] static Status Errorf(const char* fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return Status(std::string(buf));
  }

  bool ok() const { return !failed_; }
  const std::string& message() const { return message_; }
  // Prefixes the message with context ("region 3: ...").
  Status Annotate(const std::string& context) const {
    return ok() ? *this : Status(context + ": " + message_);
  }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {}  // NOLINT: must not be ok
  bool ok() const { return std::holds_alternative<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace kvtier
