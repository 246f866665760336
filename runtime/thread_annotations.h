// Clang thread-safety annotations (-Wthread-safety), no-ops elsewhere.
//
// Members say which capability guards them (GUARDED_BY), functions what they
// require, take or release (REQUIRES, ACQUIRE, RELEASE, EXCLUDES). The clang
// build of scripts/test checks every annotation with -Werror; gcc ignores
// them. Use the annotated types of runtime/mutex.h, not std::mutex, for
// anything a lock guards. See https://clang.llvm.org/docs/ThreadSafetyAnalysis.html.
#pragma once

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) KVTIER_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY KVTIER_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) KVTIER_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) KVTIER_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) KVTIER_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) KVTIER_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) KVTIER_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) KVTIER_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) KVTIER_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) KVTIER_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) KVTIER_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) KVTIER_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) KVTIER_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) KVTIER_THREAD_ANNOTATION(lock_returned(x))
// For the few functions the analysis cannot follow (a lock taken in one
// function and released in another, as around fork). Say why at each use.
#define NO_THREAD_SAFETY_ANALYSIS KVTIER_THREAD_ANNOTATION(no_thread_safety_analysis)
