// Helpers shared by the storage tests: a scratch directory that is removed
// afterwards, deterministic page contents, and a small store configuration.
// Thread-safety: test-only, single-threaded use.
#pragma once

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

// Whether the spill file's blocks hold `needle` anywhere (it reads the file
// through a descriptor of its own: the store's may be O_DIRECT).
inline bool SpillFileHolds(const SpillStore& store, const uint8_t* needle, size_t len) {
  const std::string path = "/proc/self/fd/" + std::to_string(store.file_fd_for_testing());
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  std::string bytes;
  char buf[1 << 16];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) bytes.append(buf, n);
  fclose(f);
  return bytes.find(std::string(reinterpret_cast<const char*>(needle), len)) != std::string::npos;
}

// Overwrites `len` bytes of the spill file at `offset` behind the store's
// back, as an attacker with the disk would.
inline bool PokeSpillFile(const SpillStore& store, uint64_t offset, const void* bytes, size_t len) {
  const std::string path = "/proc/self/fd/" + std::to_string(store.file_fd_for_testing());
  FILE* f = fopen(path.c_str(), "r+b");
  if (f == nullptr) return false;
  const bool ok = fseek(f, static_cast<long>(offset), SEEK_SET) == 0 &&
                  fwrite(bytes, 1, len, f) == len && fflush(f) == 0 && fsync(fileno(f)) == 0;
  return fclose(f) == 0 && ok;
}

// Reads `len` bytes of the spill file at `offset`.
inline std::vector<uint8_t> PeekSpillFile(const SpillStore& store, uint64_t offset, size_t len) {
  const std::string path = "/proc/self/fd/" + std::to_string(store.file_fd_for_testing());
  std::vector<uint8_t> out(len);
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return {};
  const bool ok =
      fseek(f, static_cast<long>(offset), SEEK_SET) == 0 && fread(out.data(), 1, len, f) == len;
  fclose(f);
  return ok ? out : std::vector<uint8_t>();
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
