/*
 * keel CLI — shared declarations.
 *
 * The `keel` executable is a thin dispatcher over subcommands. Each
 * subcommand lives in its own cmd_<name>.c and defines one
 * keel_cli_command; keel_main.c lists them in a table. Adding a command:
 *
 *   1. write cmd_<name>.c defining `const keel_cli_command keel_cmd_<name>`;
 *   2. declare it below;
 *   3. add it to the table in keel_main.c and the file to meson.build.
 *
 * A command's run() receives argc/argv with argv[0] set to the command name
 * and returns one of the exit codes below. Commands print results on stdout
 * and diagnostics on stderr.
 */
#ifndef KEEL_CLI_H
#define KEEL_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <keel/ops.h>
#include <keel/runtime.h>

/* Exit codes shared by every subcommand (see docs/cli.md). */
enum {
    KEEL_EXIT_OK = 0,        /* success                                  */
    KEEL_EXIT_ERROR = 1,     /* a runtime error (message on stderr)      */
    KEEL_EXIT_USAGE = 2,     /* bad command line                         */
    KEEL_EXIT_NO_DEVICE = 3  /* the command needs a device; none exists  */
};

typedef struct keel_cli_command {
    /** Subcommand name as typed ("devices"). */
    const char *name;
    /** Synopsis of the arguments after the name ("[--json]"), may be "". */
    const char *synopsis;
    /** One line for the command list. */
    const char *summary;
    /** Full help text printed by `keel help <name>` (ends with '\n'). */
    const char *help;
    /** Run the command; argv[0] is the command name. Returns KEEL_EXIT_*. */
    int (*run)(int argc, char **argv);
} keel_cli_command;

/* The commands. */
extern const keel_cli_command keel_cmd_devices;
extern const keel_cli_command keel_cmd_version;
extern const keel_cli_command keel_cmd_help;
extern const keel_cli_command keel_cmd_report;
extern const keel_cli_command keel_cmd_infer;
extern const keel_cli_command keel_cmd_export_onnx;
extern const keel_cli_command keel_cmd_import_onnx;

/* ---- keel_main.c ------------------------------------------------------- */

/** The command called `name`, or NULL. */
const keel_cli_command *keel_cli_find_command(const char *name);

/** Print the top-level usage (command list) to `out`. */
void keel_cli_print_usage(FILE *out);

/** Print a command's synopsis and help text to `out`. */
void keel_cli_print_command_help(FILE *out, const keel_cli_command *cmd);

/**
 * Report a command-line error for `cmd` ("keel devices: <message>") and a
 * pointer to its help on stderr. Returns KEEL_EXIT_USAGE.
 */
int keel_cli_usage_error(const keel_cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__) || defined(__clang__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/**
 * Report a failed runtime call on stderr: "keel <cmd>: <what>: <status>:
 * <keel_last_error()>". Returns KEEL_EXIT_ERROR.
 */
int keel_cli_runtime_error(const keel_cli_command *cmd, const char *what,
                           keel_status status);

/* ---- cli_util.c -------------------------------------------------------- */

/** Name of a dtype ("float32", "bfloat16", "bool"); NULL if unknown. */
const char *keel_cli_dtype_name(keel_dtype dtype);

/**
 * Name of one KEEL_FEATURE_* bit, given as its bit number ("async_copy" for
 * bit 0); NULL for a bit this CLI does not know.
 */
const char *keel_cli_feature_name(unsigned bit);

/** A whole decimal number in [lo, hi], the whole of s; false otherwise. */
bool keel_cli_parse_long(const char *s, long lo, long hi, long *out);

/** Human-readable byte count: "512 B", "1.5 KiB", "23.4 GiB". */
void keel_cli_format_bytes(uint64_t bytes, char *buf, size_t size);

/** Human-readable clock from kHz: "2.40 GHz", "800 MHz", "unknown" for 0. */
void keel_cli_format_clock(uint32_t khz, char *buf, size_t size);

/**
 * Length of a string in a fixed-size char array that a plugin filled; stops
 * at the array's end if the plugin forgot the terminating NUL.
 */
size_t keel_cli_field_len(const char *field, size_t capacity);

#endif /* KEEL_CLI_H */
