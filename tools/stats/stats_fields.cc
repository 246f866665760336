// The field table generated from stats_fields.def (see stats_fields.h).
#include "tools/stats/stats_fields.h"

namespace kvtier::stats {
namespace {

constexpr FieldKind KindOf(const char* kind) {
  return kind[0] == 'c' ? FieldKind::kCounter : FieldKind::kGauge;
}

}  // namespace

Backend BackendOf(const kvtier_stats_segment& s) {
  static constexpr struct {
    const char* word;
    Backend backend;
  } kWords[] = {{"cuda", Backend::kCuda}, {"sim", Backend::kSim}, {"host", Backend::kHost}};
  const std::string word = FieldString(s.backend);
  for (const auto& w : kWords) {
    if (word == w.word) return w.backend;
  }
  return Backend::kOther;
}

std::string ValidUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      len = 1;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      min = 0x10000;
    }
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len > 1 ? c & (0x7Fu >> len) : c;
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (ok && len > 1) ok = cp >= min && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    }
  }
  return out;
}

const std::vector<FieldInfo>& Fields() {
  static const std::vector<FieldInfo> fields = {
#define KVTIER_STAT(name, kind, doc) \
  {#name, KindOf(#kind), doc, [](const kvtier_stats_segment& s) -> uint64_t { return s.name; }},
#include "kvtier/stats_fields.def"
#undef KVTIER_STAT
  };
  return fields;
}

}  // namespace kvtier::stats
