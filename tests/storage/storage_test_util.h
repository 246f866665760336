// Helpers shared by the storage tests: a scratch directory that is removed
// afterwards, deterministic page contents, and a small store configuration.
// Thread-safety: test-only, single-threaded use.
#pragma once

#include <dirent.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/storage/spill_store.h"

namespace kvtier::storage_test {

constexpr size_t kTestPage = size_t{64} << 10;

class TempDir {
 public:
  // /var/tmp is a real disk on the usual machine; /dev/shm is tmpfs.
  explicit TempDir(const char* parent = "/var/tmp") {
    std::string tmpl = std::string(parent) + "/kvtier-test.XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  // Names in the directory other than . and .. (hidden ones included).
  std::vector<std::string> Entries(const std::string& sub = "") const {
    std::vector<std::string> names;
    DIR* d = opendir((sub.empty() ? path_ : path_ + "/" + sub).c_str());
    if (d == nullptr) return {"<cannot open directory>"};
    while (struct dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
    return names;
  }

 private:
  std::string path_;
};

// Bytes that differ for every (seed, offset), so a swapped or shifted page shows.
inline std::vector<uint8_t> Pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

inline SpillStoreConfig SmallConfig(const std::string& dir, uint32_t pages,
                                    size_t page = kTestPage) {
  SpillStoreConfig c;
  c.dir = dir;
  c.page_size = page;
  c.budget_bytes = uint64_t{pages} * page;
  c.queue_depth = 4;
  c.grow_bytes = 4 * page;
  return c;
}

}  // namespace kvtier::storage_test
