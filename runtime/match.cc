// MatchRule: parser and evaluator of KVTIER_MATCH (grammar in match.h).
#include "runtime/match.h"

#include <algorithm>
#include <charconv>

#include "runtime/units.h"

namespace kvtier {
namespace {

constexpr const char* kForm =
    "terms joined by ',' such as size>=64M, size<1G, index>=8, lib~libtorch, sym~llama_kv_cacheC, "
    "all, none";

}  // namespace

Result<MatchRule> MatchRule::Parse(std::string_view text) {
  MatchRule rule;
  std::string_view rest = text;
  if (TrimBlanks(rest).empty()) return Status::Errorf("empty match rule (accepted: %s)", kForm);
  for (bool last = false; !last;) {
    size_t comma = rest.find(',');
    std::string_view term = TrimBlanks(rest.substr(0, comma));
    last = comma == std::string_view::npos;
    if (!last) rest = rest.substr(comma + 1);
    auto bad = [&](const char* why) {
      return Status::Errorf("match term '%s': %s (accepted: %s)", EchoValue(term).c_str(), why,
                            kForm);
    };
    if (term.empty()) return bad("empty term");
    if (term == "all" || term == "none") {
      rule.terms_.push_back({term == "all" ? Field::kAll : Field::kNone, Op::kGe, 0, {}});
      continue;
    }
    Term t{};
    std::string_view name;
    std::string_view value;
    size_t op_pos = term.find_first_of("<>~");
    if (op_pos == std::string_view::npos) return bad("no operator");
    name = TrimBlanks(term.substr(0, op_pos));
    std::string_view op_and_value = term.substr(op_pos);
    if (op_and_value.starts_with(">="))
      t.op = Op::kGe, value = op_and_value.substr(2);
    else if (op_and_value.starts_with("<="))
      t.op = Op::kLe, value = op_and_value.substr(2);
    else if (op_and_value.starts_with(">"))
      t.op = Op::kGt, value = op_and_value.substr(1);
    else if (op_and_value.starts_with("<"))
      t.op = Op::kLt, value = op_and_value.substr(1);
    else
      t.op = Op::kContains, value = op_and_value.substr(1);
    value = TrimBlanks(value);
    if (value.empty()) return bad("missing value");

    if (name == "size") {
      if (t.op == Op::kContains) return bad("size takes >=, >, <= or <");
      Result<uint64_t> size = ParseSize(value);
      if (!size.ok()) return bad(size.status().message().c_str());
      t.field = Field::kSize;
      t.value = size.value();
    } else if (name == "index") {
      if (t.op == Op::kContains) return bad("index takes >=, >, <= or <");
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc() || end != value.data() + value.size()) return bad("bad index");
      t.field = Field::kIndex;
      t.value = v;
    } else if (name == "lib" || name == "sym") {
      if (t.op != Op::kContains) {
        return bad(name == "lib" ? "lib takes ~ (contains)" : "sym takes ~ (contains)");
      }
      t.field = name == "lib" ? Field::kLib : Field::kSym;
      t.text = std::string(value);
      rule.needs_caller_ = true;
    } else {
      return bad("unknown field (size, index, lib, sym)");
    }
    rule.terms_.push_back(std::move(t));
  }
  return rule;
}

bool MatchRule::Matches(uint64_t size, uint64_t index, CallSite& caller) const {
  // The caller's terms last: they look it up (dladdr, a stack walk).
  for (const bool caller_terms : {false, true}) {
    for (const Term& t : terms_) {
      const bool about_caller = t.field == Field::kLib || t.field == Field::kSym;
      if (about_caller != caller_terms) continue;
      bool ok = true;
      switch (t.field) {
        case Field::kAll:
          ok = true;
          break;
        case Field::kNone:
          ok = false;
          break;
        case Field::kLib:
          ok = caller.lib().find(t.text) != std::string::npos;
          break;
        case Field::kSym:
          ok = caller.StackHas(t.text);
          break;
        case Field::kSize:
        case Field::kIndex: {
          uint64_t v = t.field == Field::kSize ? size : index;
          switch (t.op) {
            case Op::kGe:
              ok = v >= t.value;
              break;
            case Op::kGt:
              ok = v > t.value;
              break;
            case Op::kLe:
              ok = v <= t.value;
              break;
            case Op::kLt:
              ok = v < t.value;
              break;
            case Op::kContains:
              ok = false;
              break;
          }
          break;
        }
      }
      if (!ok) return false;
    }
  }
  return true;
}

uint64_t MatchRule::MinSize() const {
  uint64_t least = 0;
  for (const Term& t : terms_) {
    if (t.field == Field::kNone) return UINT64_MAX;
    if (t.field != Field::kSize) continue;
    if (t.op == Op::kGe) least = std::max(least, t.value);
    if (t.op == Op::kGt) least = std::max(least, t.value == UINT64_MAX ? UINT64_MAX : t.value + 1);
  }
  return least;
}

}  // namespace kvtier
