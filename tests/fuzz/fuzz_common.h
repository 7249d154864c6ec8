/*
 * Shared pieces of the libFuzzer targets (tests/fuzz/README.md).
 *
 * Every parser under test reads a path, so each input is written to one
 * memfd per process and handed over as "/proc/self/fd/N": a regular file in
 * memory, rewritten in place for the next input, never touching the disk.
 * When memfd_create is missing the input goes to a temporary file instead.
 */
#ifndef KEEL_FUZZ_COMMON_H
#define KEEL_FUZZ_COMMON_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <keel/runtime.h>

struct fuzz_file {
    int fd;
    char path[64];
};

static struct fuzz_file fuzz_file_g = {.fd = -1};

static void fuzz_die(const char *what)
{
    /* Harness set-up failures only; never reached on any input. */
    fprintf(stderr, "fuzz harness: %s: %s\n", what, strerror(errno));
    abort();
}

/* Write data to the per-process file and return its path. */
static const char *fuzz_write_input(const uint8_t *data, size_t size)
{
    struct fuzz_file *f = &fuzz_file_g;
    size_t done = 0;

    if (f->fd < 0) {
        f->fd = memfd_create("keel-fuzz-input", MFD_CLOEXEC);
        if (f->fd >= 0) {
            snprintf(f->path, sizeof f->path, "/proc/self/fd/%d", f->fd);
        } else {
            const char *tmp = getenv("TMPDIR");
            snprintf(f->path, sizeof f->path, "%s/keel-fuzz-XXXXXX",
                     tmp && *tmp && strlen(tmp) < 40 ? tmp : "/tmp");
            f->fd = mkstemp(f->path);
            if (f->fd < 0)
                fuzz_die("mkstemp");
        }
    }
    if (ftruncate(f->fd, 0) != 0)
        fuzz_die("ftruncate");
    while (done < size) {
        ssize_t n = pwrite(f->fd, data + done, size - done, (off_t)done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            fuzz_die("pwrite");
        }
        done += (size_t)n;
    }
    return f->path;
}

/* Point the loader at the CPU plugin of this build unless told otherwise,
 * and select cpu:0. */
static inline void fuzz_keel_setup(void)
{
#ifdef FUZZ_CPU_PLUGIN_DIR
    setenv("KEEL_PLUGIN_PATH", FUZZ_CPU_PLUGIN_DIR, 0);
#endif
    setenv("KEEL_PLUGIN_DEFAULT_PATHS", "0", 0);
    if (keel_set_device("cpu:0") != KEEL_STATUS_OK) {
        fprintf(stderr, "fuzz harness: no cpu:0: %s\n", keel_last_error());
        abort();
    }
}

#endif /* KEEL_FUZZ_COMMON_H */
