// EngineModel: blocks, prefix cache, scheduler and step cost (see engine_model.h).
#include "tools/bench/engine_model.h"

#include <algorithm>

namespace kvtier::bench {

EngineModel::EngineModel(const EngineConfig& config, KvBackend* backend, int shared_prefix_tokens)
    : config_(config),
      backend_(backend),
      shared_blocks_(shared_prefix_tokens / config.block_tokens),
      pool_(backend->pool_blocks()),
      shared_chain_(shared_blocks_, -1) {
  for (int32_t b = 0; b < static_cast<int32_t>(pool_.size()); ++b) FreeQueuePush(b);
  backend_->Attach(this);
}

// ---- blocks and the prefix cache ----

int32_t EngineModel::BlockAt(int session, int index) const {
  int32_t b = -1;
  if (index < shared_blocks_) {
    b = shared_chain_[index];
  } else if (session < static_cast<int>(chains_.size()) &&
             index - shared_blocks_ < static_cast<int>(chains_[session].size())) {
    b = chains_[session][index - shared_blocks_];
  }
  if (b < 0) return -1;
  const Block& blk = pool_[b];
  const int32_t owner = index < shared_blocks_ ? kShared : session;
  return blk.cached && blk.owner == owner && blk.index == index ? b : -1;
}

void EngineModel::SetChain(int session, int index, int32_t block) {
  if (index < shared_blocks_) {
    shared_chain_[index] = block;
    return;
  }
  if (session >= static_cast<int>(chains_.size())) chains_.resize(session + 1);
  std::vector<int32_t>& chain = chains_[session];
  size_t i = index - shared_blocks_;
  if (chain.size() <= i) chain.resize(i + 1, -1);
  chain[i] = block;
}

int EngineModel::CachedPrefix(int session, int max_blocks) const {
  int i = 0;
  while (i < max_blocks && BlockAt(session, i) >= 0) ++i;
  return i;
}

void EngineModel::FreeQueuePush(int32_t b) {
  Block& blk = pool_[b];
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0)
    pool_[free_tail_].next = b;
  else
    free_head_ = b;
  free_tail_ = b;
  blk.in_free = true;
  ++free_count_;
  if (blk.cached) ++free_cached_;
}

void EngineModel::FreeQueueRemove(int32_t b) {
  Block& blk = pool_[b];
  if (blk.prev >= 0)
    pool_[blk.prev].next = blk.next;
  else
    free_head_ = blk.next;
  if (blk.next >= 0)
    pool_[blk.next].prev = blk.prev;
  else
    free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free = false;
  --free_count_;
  if (blk.cached) --free_cached_;
}

int32_t EngineModel::Allocate() {
  if (free_head_ < 0) return -1;
  const int32_t b = free_head_;
  FreeQueueRemove(b);
  Block& blk = pool_[b];
  if (blk.owner != -1) {
    // The block leaves its old owner's history (evicted if it was cached).
    const int session = blk.owner == kShared ? 0 : blk.owner;
    if (blk.cached && BlockAt(session, blk.index) == b) {
      SetChain(session, blk.index, -1);
      backend_->OnEvict(blk.owner == kShared ? -1 : blk.owner, blk.index);
    }
    if (blk.cached) --cached_count_;
  }
  blk.cached = false;
  blk.owner = -1;
  blk.index = -1;
  blk.ref = 1;
  return b;
}

void EngineModel::Ref(int32_t b) {
  if (pool_[b].in_free) FreeQueueRemove(b);
  ++pool_[b].ref;
}

void EngineModel::Unref(int32_t b) {
  if (--pool_[b].ref == 0) FreeQueuePush(b);
}

void EngineModel::AddBlock(Request* r, int32_t b) {
  const int index = static_cast<int>(r->blocks.size());
  r->blocks.push_back(b);
  Block& blk = pool_[b];
  if (blk.owner == -1) {  // a new block: it joins the session's history
    blk.owner = index < shared_blocks_ ? kShared : r->session;
    blk.index = index;
    SetChain(r->session, index, b);
  }
  if (uint32_t bpp = backend_->blocks_per_page()) {
    const uint32_t page = static_cast<uint32_t>(b) / bpp;
    auto it = std::lower_bound(r->pages.begin(), r->pages.end(), page);
    if (it == r->pages.end() || *it != page) r->pages.insert(it, page);
  }
}

void EngineModel::RegisterFull(Request* r) {
  const int full = std::min<int>(r->computed / config_.block_tokens, r->blocks.size());
  for (int i = r->cached_blocks; i < full; ++i) {
    Block& blk = pool_[r->blocks[i]];
    if (!blk.cached) {
      blk.cached = true;
      ++cached_count_;
    }
  }
  r->cached_blocks = std::max(r->cached_blocks, full);
}

bool EngineModel::EnsureBlocks(Request* r, int tokens) {
  while (static_cast<int>(r->blocks.size()) < BlocksFor(tokens)) {
    const int32_t b = Allocate();
    if (b < 0) return false;
    AddBlock(r, b);
  }
  return true;
}

void EngineModel::ReleaseBlocks(Request* r) {
  // The last block first, so the allocator evicts a history from its end.
  for (auto it = r->blocks.rbegin(); it != r->blocks.rend(); ++it) Unref(*it);
  r->blocks.clear();
  r->pages.clear();
  r->cached_blocks = 0;
}

void EngineModel::Preempt(Request* r) {
  ReleaseBlocks(r);
  running_kv_tokens_ -= r->reserved_tokens;
  r->reserved_tokens = 0;
  r->prefill_target = std::max(r->prefill_target, r->computed);
  r->computed = 0;
  r->admitted = false;
  r->pending_load_blocks = 0;
  r->pending_disk_blocks = 0;
  r->verified_epoch = UINT64_MAX;
  ++r->preemptions;
  ++preemptions_;
  waiting_.push_front(r);
}

// ---- scheduling ----

void EngineModel::Submit(const Launch& launch) {
  auto r = std::make_unique<Request>();
  r->id = static_cast<int>(requests_.size());
  r->session = launch.session;
  r->user_id = launch.user_id;
  r->question_id = launch.question_id;
  r->prompt_tokens = launch.prompt_tokens;
  r->answer_tokens = launch.answer_tokens;
  r->prefill_target = launch.prompt_tokens;
  r->measured = launch.measured;
  r->returning = launch.returning;
  r->launch_s = launch.time_s;
  if (launch.session >= static_cast<int>(chains_.size())) chains_.resize(launch.session + 1);
  waiting_.push_back(r.get());
  requests_.push_back(std::move(r));
  if (next_step_s_ == Workload::kNever) next_step_s_ = launch.time_s;
}

bool EngineModel::Admit(Request* r, int budget, std::vector<Work>* work) {
  const int bt = config_.block_tokens;
  const double reserve = r->prefill_target + r->answer_tokens - r->generated;
  if (config_.running_kv_limit_tokens > 0 && !running_.empty() &&
      running_kv_tokens_ + reserve > config_.running_kv_limit_tokens) {
    return false;
  }
  const int max_hit = (r->prefill_target - 1) / bt;  // at least one token is computed
  const int hit = CachedPrefix(r->session, max_hit);
  int ext_disk = 0;
  const int ext = backend_->ExternalHitBlocks(r->session, hit, max_hit - hit, &ext_disk);
  const int start = (hit + ext) * bt;
  const int n = std::min(r->prefill_target - start, budget);
  int hit_in_free = 0;
  for (int i = 0; i < hit; ++i) hit_in_free += pool_[BlockAt(r->session, i)].in_free;
  const int needed = BlocksFor(start + n) - hit;
  if (static_cast<int64_t>(free_count_) - hit_in_free < needed) return false;

  for (int i = 0; i < hit; ++i) {
    const int32_t b = BlockAt(r->session, i);
    Ref(b);
    AddBlock(r, b);
  }
  for (int i = 0; i < ext; ++i) {  // copied in from another tier: cached at once
    const int32_t b = Allocate();
    AddBlock(r, b);
    pool_[b].cached = true;
    ++cached_count_;
  }
  r->pending_load_blocks = ext;
  r->pending_disk_blocks = ext_disk;
  r->computed = start;
  r->cached_blocks = hit + ext;
  if (!r->hits_recorded) {
    r->hit_device = hit * bt;
    backend_->ClassifyHits(*r, hit, bt);  // may split the hit across tiers
    r->hit_host += (ext - ext_disk) * bt;
    r->hit_disk += ext_disk * bt;
    r->recomputed = r->prompt_tokens - (hit + ext) * bt;
    r->hits_recorded = true;
  }
  const bool ok = EnsureBlocks(r, start + n);
  (void)ok;  // checked above: enough free blocks
  work->push_back({r, n, start, true});
  r->reserved_tokens = reserve;
  running_kv_tokens_ += reserve;
  r->admitted = true;
  return true;
}

double EngineModel::ComputeSeconds(const std::vector<Work>& work) const {
  const double p = config_.shape.params / config_.tp;
  const double hq = static_cast<double>(config_.shape.heads) * config_.shape.head_dim / config_.tp;
  const double l = config_.shape.layers;
  const double kv = config_.kv_bytes_per_token();
  double flops = 0;
  double bytes = config_.weight_bytes();
  for (const Work& w : work) {
    flops += 2 * p * w.n + 4 * l * hq * w.n * (w.context + w.n / 2.0);
    bytes += kv * (w.context + w.n);
  }
  return std::max(flops / config_.prefill_flops, bytes / config_.hbm_bps);
}

void EngineModel::Step(double t, std::vector<Request*>* finished) {
  std::vector<Work> work;
  int budget = config_.max_batched_tokens;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Request* r = running_[i];
    const bool prefill = r->computed < r->prefill_target;
    const int n = prefill ? std::min(r->prefill_target - r->computed, budget) : 1;
    bool self_preempted = false;
    while (!EnsureBlocks(r, r->computed + n)) {
      Request* victim = running_.back();
      running_.pop_back();
      Preempt(victim);
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    work.push_back({r, n, r->computed, prefill});
    budget -= n;
  }
  while (!waiting_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs &&
         budget > 0) {
    Request* r = waiting_.front();
    if (!Admit(r, budget, &work)) break;
    waiting_.pop_front();
    running_.push_back(r);
    budget -= work.back().n;
  }
  if (work.empty()) {
    if (running_.empty() && !waiting_.empty()) {
      // Even an empty pool cannot hold its first chunk: it can never run.
      Request* r = waiting_.front();
      waiting_.pop_front();
      r->finish_s = r->first_token_s = -1;
      ++rejected_;
      finished->push_back(r);
      next_step_s_ = waiting_.empty() ? Workload::kNever : t;
      return;
    }
    next_step_s_ = Workload::kNever;
    return;
  }

  std::vector<Request*> batch;
  batch.reserve(work.size());
  for (const Work& w : work) batch.push_back(w.r);
  const double end = backend_->RunStep(batch, t, config_.step_overhead_s, ComputeSeconds(work));

  for (const Work& w : work) {
    Request* r = w.r;
    r->pending_load_blocks = 0;
    r->pending_disk_blocks = 0;
    if (w.prefill) {
      r->computed += w.n;
      if (r->computed >= r->prefill_target && r->first_token_s < 0) {
        r->first_token_s = end;  // the step that ends the prefill samples token 1
        r->generated = 1;
      }
    } else {
      ++r->computed;
      ++r->generated;
    }
    RegisterFull(r);
  }
  for (const Work& w : work) {
    Request* r = w.r;
    if (r->first_token_s < 0 || r->generated < r->answer_tokens || r->finish_s >= 0) continue;
    r->finish_s = end;
    backend_->OnFinish(*r);
    ReleaseBlocks(r);
    running_kv_tokens_ -= r->reserved_tokens;
    r->reserved_tokens = 0;
    std::erase(running_, r);
    finished->push_back(r);
  }
  next_step_s_ = (running_.empty() && waiting_.empty()) ? Workload::kNever : end;
}

}  // namespace kvtier::bench
