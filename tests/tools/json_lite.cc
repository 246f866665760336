// A small strict JSON parser for the tool tests (see json_lite.h).
#include "tests/tools/json_lite.h"

#include <cstdlib>

namespace kvtier::testing {

Json::Json() = default;
Json::Json(const Json&) = default;
Json::Json(Json&&) noexcept = default;
Json& Json::operator=(const Json&) = default;
Json& Json::operator=(Json&&) noexcept = default;
Json::~Json() = default;

namespace {

const Json& NullJson() {
  static const Json null;
  return null;
}

class Parser {
 public:
  explicit Parser(const std::string& s) : s_(s) {}

  bool Parse(Json* out, std::string* error) {
    bool ok = Value(out, 0);
    Space();
    if (ok && pos_ != s_.size()) ok = Fail("trailing data");
    if (!ok) *error = error_ + " at offset " + std::to_string(pos_);
    return ok;
  }

 private:
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  void Space() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t'))
      ++pos_;
  }
  bool Literal(const char* word) {
    const std::string w = word;
    if (s_.compare(pos_, w.size(), w) != 0) return Fail("bad literal");
    pos_ += w.size();
    return true;
  }
  bool Value(Json* out, int depth) {
    if (depth > 64) return Fail("nested too deep");
    Space();
    if (pos_ >= s_.size()) return Fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->type = Json::Type::kString;
      return String(&out->text);
    }
    if (c == 't' || c == 'f') {
      out->type = Json::Type::kBool;
      out->boolean = c == 't';
      return Literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      out->type = Json::Type::kNull;
      return Literal("null");
    }
    return NumberValue(out);
  }
  bool Digits() {
    const size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
    return pos_ > start;
  }
  bool NumberValue(Json* out) {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '0') {
      ++pos_;
    } else if (!Digits()) {
      return Fail("bad value");
    }
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!Digits()) return Fail("bad fraction");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!Digits()) return Fail("bad exponent");
    }
    out->type = Json::Type::kNumber;
    out->text = s_.substr(start, pos_ - start);
    return true;
  }
  static void PutUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool Hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return Fail("short \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      *v <<= 4;
      if (h >= '0' && h <= '9') {
        *v |= h - '0';
      } else if (h >= 'a' && h <= 'f') {
        *v |= h - 'a' + 10;
      } else if (h >= 'A' && h <= 'F') {
        *v |= h - 'A' + 10;
      } else {
        return Fail("bad \\u escape");
      }
    }
    return true;
  }
  bool String(std::string* out) {
    ++pos_;  // the opening quote
    while (true) {
      if (pos_ >= s_.size()) return Fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_++]);
      if (c == '"') return true;
      if (c < 0x20) return Fail("raw control character in a string");
      if (c != '\\') {
        *out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= s_.size()) return Fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
          *out += '"';
          break;
        case '\\':
          *out += '\\';
          break;
        case '/':
          *out += '/';
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          uint32_t cp;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {
            uint32_t low;
            if (s_.compare(pos_, 2, "\\u") != 0) return Fail("lone surrogate");
            pos_ += 2;
            if (!Hex4(&low) || low < 0xDC00 || low > 0xDFFF) return Fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail("lone surrogate");
          }
          PutUtf8(cp, out);
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
  }
  bool Array(Json* out, int depth) {
    out->type = Json::Type::kArray;
    ++pos_;
    Space();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    while (true) {
      Json item;
      if (!Value(&item, depth + 1)) return false;
      out->items.push_back(std::move(item));
      Space();
      if (pos_ >= s_.size()) return Fail("unterminated array");
      if (s_[pos_] == ']') {
        ++pos_;
        return true;
      }
      if (s_[pos_++] != ',') return Fail("expected , or ]");
    }
  }
  bool Object(Json* out, int depth) {
    out->type = Json::Type::kObject;
    ++pos_;
    Space();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    while (true) {
      Space();
      if (pos_ >= s_.size() || s_[pos_] != '"') return Fail("expected a key");
      std::string key;
      if (!String(&key)) return false;
      for (const auto& m : out->members) {
        if (m.first == key) return Fail("duplicate key " + key);
      }
      Space();
      if (pos_ >= s_.size() || s_[pos_++] != ':') return Fail("expected :");
      Json value;
      if (!Value(&value, depth + 1)) return false;
      out->members.emplace_back(std::move(key), std::move(value));
      Space();
      if (pos_ >= s_.size()) return Fail("unterminated object");
      if (s_[pos_] == '}') {
        ++pos_;
        return true;
      }
      if (s_[pos_++] != ',') return Fail("expected , or }");
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

const Json& Json::operator[](const std::string& key) const {
  for (const auto& m : members) {
    if (m.first == key) return m.second;
  }
  return NullJson();
}

const Json& Json::operator[](size_t index) const {
  return index < items.size() ? items[index] : NullJson();
}

bool Json::Has(const std::string& key) const {
  for (const auto& m : members) {
    if (m.first == key) return true;
  }
  return false;
}

uint64_t Json::U64() const {
  if (type != Type::kNumber || text.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::strtoull(text.c_str(), nullptr, 10);
}

double Json::Number() const {
  return type == Type::kNumber ? std::strtod(text.c_str(), nullptr) : 0.0;
}

bool ParseJson(const std::string& text, Json* out, std::string* error) {
  *out = Json();
  return Parser(text).Parse(out, error);
}

}  // namespace kvtier::testing
