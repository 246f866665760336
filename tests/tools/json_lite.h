// A small strict JSON parser for the tool tests: checks that kvtier-top
// --json prints valid JSON (RFC 8259, no trailing data) and lets the tests
// read figures out of it. Numbers keep their text, so 64-bit counters
// compare exactly. Thread-safety: value types.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvtier::testing {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  std::string text;  // a string's value, or a number as written
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  // Out of line: std::pair<std::string, Json> is complete only after this
  // struct, and clang instantiates inline special members too early.
  Json();
  Json(const Json&);
  Json(Json&&) noexcept;
  Json& operator=(const Json&);
  Json& operator=(Json&&) noexcept;
  ~Json();

  // Member `key` of an object, or a null value if there is none.
  const Json& operator[](const std::string& key) const;
  const Json& operator[](size_t index) const;
  bool Has(const std::string& key) const;
  bool IsNull() const { return type == Type::kNull; }
  uint64_t U64() const;   // 0 unless a non-negative integer
  double Number() const;  // 0 unless a number
  size_t size() const { return type == Type::kArray ? items.size() : members.size(); }
};

// False (and *error says where and why) unless `text` is one JSON value.
bool ParseJson(const std::string& text, Json* out, std::string* error);

}  // namespace kvtier::testing
