// Reader side of the kvtier stats segments (include/kvtier/stats.h).
//
// SegmentDir lists the kvtier.<pid> files of a directory (through a directory
// fd, so a renamed or replaced directory path does not mix two directories),
// checks that each writer is alive and still the same process, removes the
// segments of dead processes, refuses layouts it does not know with a message
// that says what to do, and copies a consistent snapshot under the sequence
// lock (bounded retries: a stopped writer never hangs a reader).
// Thread-safety: a SegmentDir is immutable after Open; its methods may run
// from several threads at once. SnapshotCopy is reentrant.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/stats.h"

namespace kvtier::stats {

inline constexpr const char* kDefaultDir = "/dev/shm";
// Attempts before a reader gives up on a writer that keeps the sequence odd
// (a writer holds it for microseconds; only a stopped process holds it long).
inline constexpr int kSnapshotTries = 2000;

enum class ReadState {
  kOk,            // `snapshot` holds one consistent publish
  kGone,          // the file vanished (the process exited meanwhile)
  kStaleRemoved,  // the writer is dead or its pid reused: file removed
  kNotReady,      // the writer is still creating it
  kBusy,          // the sequence stayed odd through every retry
  kRefused,       // not a layout this reader knows (magic, version, size)
  kError,         // cannot open or map it (permissions, I/O)
};
const char* ReadStateName(ReadState state);

struct ReadResult {
  ReadState state = ReadState::kError;
  int32_t pid = 0;
  std::string name;                                      // "kvtier.<pid>"
  std::string message;                                   // why, for every state but kOk
  std::shared_ptr<const kvtier_stats_segment> snapshot;  // kOk only
};

// Copies one consistent snapshot out of a mapped segment (at least
// sizeof(kvtier_stats_segment) bytes, 8-byte aligned). False if the writer
// kept the sequence odd or changing through `tries` attempts.
bool SnapshotCopy(const void* mapped, kvtier_stats_segment* out, int tries = kSnapshotTries);

class SegmentDir {
 public:
  // Opens `path`; on failure returns null and sets *error to a message.
  static std::unique_ptr<SegmentDir> Open(const std::string& path, std::string* error);
  ~SegmentDir();
  SegmentDir(const SegmentDir&) = delete;
  SegmentDir& operator=(const SegmentDir&) = delete;

  const std::string& path() const { return path_; }
  // Pids of the kvtier.<pid> entries, ascending.
  std::vector<int32_t> List() const;
  // Reads the segment of `pid`; removes it if its process is dead or the pid
  // now belongs to another process.
  ReadResult Read(int32_t pid) const;
  // Read() for every listed pid (or only `only_pid` when it is > 0). Results
  // of state kGone are dropped.
  std::vector<ReadResult> ReadAll(int32_t only_pid = 0) const;

 private:
  SegmentDir(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  // Unlinks `name` if it is still the file `fd` refers to (not a new segment
  // that a process with a reused pid created meanwhile).
  bool RemoveIfSame(const std::string& name, int fd) const;

  int fd_;
  std::string path_;
};

}  // namespace kvtier::stats
