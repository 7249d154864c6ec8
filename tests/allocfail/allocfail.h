/*
 * Allocation-failure injection for tests, in the manner of SQLite's
 * fault injection: make the Nth allocation fail, run, check, repeat.
 *
 * The hook is an interposer, not code in the library. allocfail.c defines
 * malloc, calloc, realloc, free, posix_memalign, aligned_alloc, memalign,
 * strdup, strndup, vasprintf and asprintf in the test program itself; the
 * dynamic linker binds every shared object's calls to them (the program
 * comes first in symbol lookup), including plugins opened with RTLD_LOCAL.
 * Each call looks at its return address: only allocations made from inside
 * libkeel.so or libkeel-cpu.so (their loaded segments, found with
 * dl_iterate_phdr) are counted, may be failed and are tracked; everything
 * else (libc, OpenBLAS, jansson, zlib, the test itself) passes straight to
 * glibc. No core source file carries a hook, and the same library build
 * that ships is the one under test.
 *
 * What it cannot see: memory that libc allocates on keel's behalf (the
 * FILE of an fopen) and allocations of third-party libraries keel calls;
 * those are never failed. It replaces malloc, so it cannot be combined
 * with AddressSanitizer or valgrind (both own malloc); the test is built in
 * the plain build only, and leaks are found by the tracking table instead.
 */
#ifndef KEEL_ALLOCFAIL_H
#define KEEL_ALLOCFAIL_H

#include <stddef.h>
#include <stdint.h>

/** Find the keel objects loaded now (call after the plugins are loaded;
 *  again after a new one). Returns how many were found. */
int allocfail_scan_objects(void);

/** Start counting keel allocations from 0; fail the one numbered `n`
 *  (1-based; 0: fail none). With `persist`, that one and every later one
 *  fail. */
void allocfail_arm(uint64_t n, int persist);

/** Stop failing (counting and tracking go on). */
void allocfail_disarm(void);

/** keel allocations since the last arm, and whether one was failed. */
uint64_t allocfail_count(void);
int allocfail_fired(void);

/** Where the first failed allocation since the last arm was made: the
 *  function (exported ones) or object and offset (for addr2line). */
void allocfail_describe_failed(char *buf, size_t size);

/** Live tracked allocations (made by keel, not yet freed) and their bytes. */
uint64_t allocfail_live(size_t *bytes);

/** Mark every live allocation as old; allocfail_report_new() then prints
 *  (up to `max`) those made since, with the keel function that made them,
 *  and returns how many there are. */
void allocfail_mark(void);
uint64_t allocfail_report_new(int max);

#endif /* KEEL_ALLOCFAIL_H */
