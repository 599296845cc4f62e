// MOETRACE_GLIBC_HEAP: malloc is glibc's, on Linux, where heap.cc and
// heap_new.cc act (heap.h).
//
// A sanitizer's allocator replaces glibc's malloc but not mallopt or
// malloc_trim, which then set up glibc's arenas beside it: glibc aborts at
// the next thread's exit (__malloc_arena_thread_freeres). It replaces
// operator new as well, and pairs each block with its release (ASan reports
// a block of malloc freed by operator delete). Nothing to set up, give back
// or replace there.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MOETRACE_SANITIZED_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define MOETRACE_SANITIZED_ALLOCATOR 1
#endif
#endif

#if defined(__GLIBC__) && defined(__linux__) && !defined(MOETRACE_SANITIZED_ALLOCATOR)
#define MOETRACE_GLIBC_HEAP 1
#endif
