// The two production IoQueues behind Env::Default(): io_uring (liburing) and
// a synchronous pread/pwrite queue for kernels or sandboxes that refuse
// io_uring (ENOSYS, EPERM). Internal to runtime/storage.
// Thread-safety: single-owner, as IoQueue.
#pragma once

#include <memory>

#include "runtime/status.h"
#include "runtime/storage/env.h"

namespace kvtier {

Result<std::unique_ptr<IoQueue>> NewPosixUringQueue(unsigned depth);
std::unique_ptr<IoQueue> NewPosixSyncQueue(unsigned depth);

}  // namespace kvtier
