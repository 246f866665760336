// PageCipher: AES-256-GCM over intel-ipsec-mb or OpenSSL EVP.
// Thread-safety: see the header.
#include "runtime/storage/page_cipher.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <new>

#include "runtime/log.h"

#ifdef KVTIER_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

namespace kvtier {
namespace {

constexpr size_t kKeyBytes = kCipherKeyBytes;
constexpr size_t kNonceBytes = 12;
constexpr size_t kAadBytes = 16;
constexpr size_t kSealChunk = size_t{16} << 10;

void PutLe(uint8_t* out, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The nonce: slot (4 bytes) and generation (8), little-endian. A slot's
// generation grows with every write to it, so no two writes share one.
void NonceFor(const SealId& id, uint8_t out[kNonceBytes]) {
  PutLe(out, id.slot, 4);
  PutLe(out + 4, id.generation, 8);
}

// The additional data: region, page (4 bytes each) and generation (8).
void AadFor(const SealId& id, uint8_t out[kAadBytes]) {
  PutLe(out, id.place.region, 4);
  PutLe(out + 4, id.place.page, 4);
  PutLe(out + 8, id.generation, 8);
}

Status TagMismatch() {
  return Status::Error(
      "its AES-256-GCM tag does not match (the bytes on disk were changed, moved from another "
      "slot or replayed from an older write)");
}

Status KeyWiped() { return Status::Error("the spill key was wiped: the process is exiting"); }

std::string OpenSslError(const char* what) {
  char text[256];
  ERR_error_string_n(ERR_get_error(), text, sizeof text);
  ERR_clear_error();
  return std::string(what) + ": " + text;
}

// An EVP context that OpenSSL frees, and wipes, when it goes out of scope.
struct Context {
  Context() : ctx(EVP_CIPHER_CTX_new()) {}
  ~Context() { EVP_CIPHER_CTX_free(ctx); }
  EVP_CIPHER_CTX* ctx;
};

#ifdef KVTIER_HAVE_IPSEC_MB
// Where the expanded key sits in the key's page: after the key, on the
// 64-byte boundary intel-ipsec-mb's code wants (its header declares the
// alignment only where LINUX is defined).
constexpr size_t kExpandedKeyOffset = 64;

// intel-ipsec-mb's function table for this CPU's best code path, or null
// where the CPU has no AES-NI (its software AES is slower than OpenSSL's).
// Made once and never freed; its GCM functions take no state from it, so
// every thread (and a fork child) calls through it at once.
IMB_MGR* IpsecMbManager() {
  static IMB_MGR* const manager = []() -> IMB_MGR* {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) return nullptr;
    init_mb_mgr_auto(m, nullptr);
    if (imb_get_errno(m) != 0 || (m->features & IMB_FEATURE_AESNI) == 0 ||
        m->used_arch < IMB_ARCH_SSE) {
      free_mb_mgr(m);
      return nullptr;
    }
    return m;
  }();
  return manager;
}
#endif

}  // namespace

bool ParseCipherLib(const std::string& word, CipherLib* out) {
  if (word == "auto") {
    *out = CipherLib::kAuto;
  } else if (word == "ipsec-mb") {
    *out = CipherLib::kIpsecMb;
  } else if (word == "openssl") {
    *out = CipherLib::kOpenSsl;
  } else {
    return false;
  }
  return true;
}

bool PageCipher::IpsecMbRuns() {
#ifdef KVTIER_HAVE_IPSEC_MB
  return IpsecMbManager() != nullptr;
#else
  return false;
#endif
}

Result<std::unique_ptr<PageCipher>> PageCipher::Create(CipherLib lib) {
  return CreateWith(lib, nullptr);
}

Result<std::unique_ptr<PageCipher>> PageCipher::CreateWithKeyForTest(
    CipherLib lib, const uint8_t key[kCipherKeyBytes]) {
  return CreateWith(lib, key);
}

Result<std::unique_ptr<PageCipher>> PageCipher::CreateWith(CipherLib lib, const uint8_t* key) {
  if (lib == CipherLib::kIpsecMb && !IpsecMbRuns()) {
#ifdef KVTIER_HAVE_IPSEC_MB
    return Status::Error(
        "disk encryption: intel-ipsec-mb cannot run on this CPU (no AES-NI); "
        "KVTIER_DISK_CIPHER=openssl or auto uses OpenSSL");
#else
    return Status::Error(
        "disk encryption: this build has no intel-ipsec-mb (libipsec-mb-dev was missing); "
        "KVTIER_DISK_CIPHER=openssl or auto uses OpenSSL");
#endif
  }
  std::unique_ptr<PageCipher> c(new PageCipher());
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    return Status::Errorf("disk encryption: no page for the key: %s", strerror(errno));
  }
  c->key_ = static_cast<uint8_t*>(mem);
  // Out of core dumps before the key is in it; a fork child keeps it (it
  // reads its parent's spilled pages).
  if (madvise(mem, page, MADV_DONTDUMP) != 0) {
    return Status::Errorf("disk encryption: cannot keep the key out of core dumps: %s",
                          strerror(errno));
  }
  c->locked_ = mlock(mem, page) == 0;
  if (!c->locked_) {
    static std::atomic<bool> warned{false};
    WarnOnce(&warned,
             "disk encryption: mlock of the key's page failed (%s): it may be swapped out "
             "(raise RLIMIT_MEMLOCK to lock it)",
             strerror(errno));
  }
  size_t got = 0;
  if (key != nullptr) {
    memcpy(c->key_, key, kKeyBytes);
    got = kKeyBytes;
  }
  while (got < kKeyBytes) {
    const ssize_t n = getrandom(c->key_ + got, kKeyBytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::Errorf("disk encryption: getrandom failed: %s", strerror(errno));
    got += static_cast<size_t>(n);
  }
  c->aes_gcm_ = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  if (c->aes_gcm_ == nullptr) {
    return Status::Error(OpenSslError("disk encryption: OpenSSL has no AES-256-GCM"));
  }
#ifdef KVTIER_HAVE_IPSEC_MB
  if (lib != CipherLib::kOpenSsl && IpsecMbRuns()) {
    static_assert(kExpandedKeyOffset + sizeof(gcm_key_data) <= 4096);
    auto* expanded = new (c->key_ + kExpandedKeyOffset) gcm_key_data;
    if (reinterpret_cast<uintptr_t>(expanded) % 64 != 0) {
      return Status::Error("disk encryption: the expanded key is not 64-byte aligned");
    }
    c->mb_ = IpsecMbManager();
    IMB_AES256_GCM_PRE(c->mb_, c->key_, expanded);
    c->mb_key_ = expanded;
  }
#endif
  return c;
}

void PageCipher::Wipe() {
  WriterMutexLock lock(&key_mu_);
  if (wiped_ || key_ == nullptr) return;
  // The key and, after it, intel-ipsec-mb's expanded key.
  OPENSSL_cleanse(key_, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
  wiped_ = true;
}

bool PageCipher::wiped() const {
  ReaderMutexLock lock(&key_mu_);
  return wiped_;
}

PageCipher::~PageCipher() {
  EVP_CIPHER_free(aes_gcm_);
  if (key_ != nullptr) {
    // The key and, after it, intel-ipsec-mb's expanded key.
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    OPENSSL_cleanse(key_, page);
    munmap(key_, page);
  }
}

bool PageCipher::seals_at_copy_speed() const {
#ifdef KVTIER_HAVE_IPSEC_MB
  constexpr uint64_t kVectorAes = IMB_FEATURE_VAES | IMB_FEATURE_VPCLMULQDQ;
  return mb_ != nullptr && mb_->used_arch == IMB_ARCH_AVX512 &&
         (mb_->features & kVectorAes) == kVectorAes;
#else
  return false;
#endif
}

std::string PageCipher::lib_name() const {
#ifdef KVTIER_HAVE_IPSEC_MB
  if (mb_ != nullptr) {
    static const char* const kArch[] = {"none", "no AES-NI", "SSE", "AVX", "AVX2", "AVX-512"};
    const char* arch = mb_->used_arch < std::size(kArch) ? kArch[mb_->used_arch] : "?";
    return std::string("intel-ipsec-mb ") + imb_get_version_str() + " (" + arch +
           (seals_at_copy_speed() ? ", VAES" : "") + ")";
  }
#endif
  return OpenSSL_version(OPENSSL_VERSION);
}

#ifdef KVTIER_HAVE_IPSEC_MB
Status PageCipher::SealWithIpsecMb(const SealId& id, const uint8_t* src, uint8_t* dst, size_t len,
                                   uint8_t tag[kSealTagBytes]) const {
  uint8_t nonce[kNonceBytes], aad[kAadBytes];
  NonceFor(id, nonce);
  AadFor(id, aad);
  const auto* key = static_cast<const gcm_key_data*>(mb_key_);
  gcm_context_data ctx;
  IMB_AES256_GCM_ENC(mb_, key, &ctx, dst, src, len, nonce, aad, sizeof aad, tag, kSealTagBytes);
  OPENSSL_cleanse(&ctx, sizeof ctx);  // the last block's key stream
  return Status::Ok();
}

Status PageCipher::OpenWithIpsecMb(const SealId& id, uint8_t* data, size_t len,
                                   const uint8_t tag[kSealTagBytes]) const {
  uint8_t nonce[kNonceBytes], aad[kAadBytes], computed[kSealTagBytes];
  NonceFor(id, nonce);
  AadFor(id, aad);
  const auto* key = static_cast<const gcm_key_data*>(mb_key_);
  gcm_context_data ctx;
  IMB_AES256_GCM_DEC(mb_, key, &ctx, data, data, len, nonce, aad, sizeof aad, computed,
                     kSealTagBytes);
  OPENSSL_cleanse(&ctx, sizeof ctx);
  if (CRYPTO_memcmp(computed, tag, kSealTagBytes) != 0) return TagMismatch();
  return Status::Ok();
}
#endif

Status PageCipher::Seal(const SealId& id, const uint8_t* src, uint8_t* dst, size_t len,
                        uint8_t tag[kSealTagBytes]) const {
  ReaderMutexLock lock(&key_mu_);
  if (wiped_) return KeyWiped();
#ifdef KVTIER_HAVE_IPSEC_MB
  if (mb_ != nullptr) return SealWithIpsecMb(id, src, dst, len, tag);
#endif
  uint8_t nonce[kNonceBytes], aad[kAadBytes];
  NonceFor(id, nonce);
  AadFor(id, aad);
  Context c;
  int out = 0, tail = 0;
  bool ok = c.ctx != nullptr && EVP_EncryptInit_ex2(c.ctx, aes_gcm_, key_, nonce, nullptr) == 1 &&
            EVP_EncryptUpdate(c.ctx, nullptr, &out, aad, sizeof aad) == 1;
  // Through a chunk that stays in the cache, copied out with memcpy: dst is
  // an I/O buffer the disk has just read, and the cipher's own stores each
  // fetched a line of it first (about 2x the cost of the page's AES on
  // this machine). The chunk holds ciphertext only.
  alignas(64) uint8_t chunk[kSealChunk];
  for (size_t off = 0; ok && off < len; off += kSealChunk) {
    const size_t n = std::min(kSealChunk, len - off);
    ok = EVP_EncryptUpdate(c.ctx, chunk, &out, src + off, static_cast<int>(n)) == 1;
    if (ok && static_cast<size_t>(out) != n) {
      return Status::Errorf("disk encryption: sealing a page failed: OpenSSL wrote %d of %zu bytes",
                            out, n);
    }
    if (ok) memcpy(dst + off, chunk, n);
  }
  ok = ok && EVP_EncryptFinal_ex(c.ctx, chunk, &tail) == 1 &&
       EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, tag) == 1;
  if (!ok) return Status::Error(OpenSslError("disk encryption: sealing a page failed"));
  if (tail != 0) {
    // GCM is a stream mode: Update writes every byte, Final none.
    return Status::Errorf(
        "disk encryption: sealing a page failed: OpenSSL wrote %d bytes at the end", tail);
  }
  return Status::Ok();
}

Status PageCipher::Open(const SealId& id, uint8_t* data, size_t len,
                        const uint8_t tag[kSealTagBytes]) const {
  ReaderMutexLock lock(&key_mu_);
  if (wiped_) return KeyWiped();
#ifdef KVTIER_HAVE_IPSEC_MB
  if (mb_ != nullptr) return OpenWithIpsecMb(id, data, len, tag);
#endif
  uint8_t nonce[kNonceBytes], aad[kAadBytes], expected[kSealTagBytes];
  NonceFor(id, nonce);
  AadFor(id, aad);
  memcpy(expected, tag, kSealTagBytes);
  Context c;
  int out = 0, tail = 0;
  if (c.ctx == nullptr || EVP_DecryptInit_ex2(c.ctx, aes_gcm_, key_, nonce, nullptr) != 1 ||
      EVP_DecryptUpdate(c.ctx, nullptr, &out, aad, sizeof aad) != 1 ||
      EVP_DecryptUpdate(c.ctx, data, &out, data, static_cast<int>(len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(c.ctx, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, expected) != 1) {
    return Status::Error(OpenSslError("disk encryption: opening a page failed"));
  }
  if (EVP_DecryptFinal_ex(c.ctx, data + out, &tail) != 1) {
    ERR_clear_error();
    return TagMismatch();
  }
  return Status::Ok();
}

void PageCipher::CopyKeyForTest(uint8_t out[32]) const {
  ReaderMutexLock lock(&key_mu_);
  memcpy(out, key_, kKeyBytes);
}

}  // namespace kvtier
