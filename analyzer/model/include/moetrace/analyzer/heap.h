// The process's heap (glibc's malloc), set up for what moetrace's programs do:
// allocate much, briefly, right after start. Elsewhere (another libc, a
// sanitizer's allocator) both functions do nothing.
#pragma once

namespace moetrace::analyzer {

// Called once at the start of the CLI's main, before any thread (not for
// `run`, whose CUDA backend hosts the driver's threads). Not in a
// library inside someone else's process (the Python module), and not in the
// GUI: there, sharing one heap with the analyses, a pan's slowest frame while
// they ran went from 26-33 ms to 75-116 ms of the GUI thread's CPU, with the
// heap's trims off as well: each QPainter's state (over 1 KiB) made glibc
// sort the chunks the analysis threads had freed (BENCHMARKS.md, "The CLI's
// heap on huge pages").
//
// Every fresh 4 KiB page of memory costs a page fault, and on the 2-vCPU VMs
// moetrace is measured on a fault costs 11-12 us (a C loop touching 64 MiB
// page by page, against 0.24 us a 4 KiB page where the same memory, freed a
// moment before, is on huge pages; fresh memory on a VM whose host takes
// free memory back costs more in huge pages, where none are asked for:
// huge_pages_wanted, huge_pages.h): a trace of a few MB spent a quarter of its report in them, in
// memory glibc's heap handed out 128 KiB at a time. This asks for huge pages
// over the heap's first 32 MiB and keeps allocations in that memory:
// - one arena for every thread (glibc gives each thread its own, whose
//   memory a program cannot advise);
// - the heap grown 16 MiB at a time, and up to 64 MiB freed at its top kept
//   for the next allocations (glibc's defaults: 128 KiB for both);
// - blocks under 32 MiB taken from the heap (the highest threshold glibc
//   takes, and where its own threshold ends up once a program frees blocks
//   that big); larger ones are mapped apart and advised where they are made
//   (huge_pages.h).
// A hint: where the system gives no huge pages, only the settings above hold.
// False where there is nothing to set up (!glibc_heap(), or a heap that did
// not grow by brk). huge_pages_for_new_blocks() keeps the heap's later growth
// advised.
bool heap_on_huge_pages();

// From now on, operator new asks for huge pages over the memory it takes
// fresh from the system: a block of 32 MiB or more (glibc maps each apart
// unless its heap has that much free), and each part the heap grows by. That is what glibc does itself under
// GLIBC_TUNABLES=glibc.malloc.hugetlb=1, which only the environment can set,
// before main. Defined in heap_new.cc, which replaces operator new: only the
// programs link it (moetrace::heap_new: the CLI and the GUI, not `run`, see
// heap_on_huge_pages), never a library. Measured on a 10 M-event trace
// (BENCHMARKS.md, "The CLI's heap on huge pages"). Nothing where
// !glibc_heap().
void huge_pages_for_new_blocks();

// True where malloc is glibc's, on Linux (not another libc's, not a
// sanitizer's): where the functions here act.
bool glibc_heap();

// Gives memory freed inside the heap back to the system (malloc_trim): after
// a stage that freed much of what it held, so that the next stage's peak does
// not stand on it.
void release_free_memory();

}  // namespace moetrace::analyzer
