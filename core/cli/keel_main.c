/*
 * keel — the command-line tool: one executable, several subcommands.
 *
 *   keel devices [--json] [--fallbacks]   plugins and devices found
 *   keel version                           keel and device ABI versions
 *   keel help [COMMAND]                    help text
 *
 * Dispatch is a table of keel_cli_command (see cli.h). `keel CMD --help`
 * (or -h) anywhere among CMD's arguments prints CMD's help, for every
 * command, before the command runs. An unknown command or option is a usage
 * error: a message on stderr and exit status 2.
 */
#include "cli.h"

#include <stdarg.h>
#include <string.h>

/* Commands built from other folders (conformance/, bench/) are weak: a
 * build without them simply lacks the command. */
extern const keel_cli_command keel_cmd_conform __attribute__((weak));
extern const keel_cli_command keel_cmd_bench __attribute__((weak));

/* The subcommands, in the order `keel --help` lists them; NULL entries
 * (commands not built) are skipped. */
static const keel_cli_command *const command_table[] = {
    &keel_cmd_devices, &keel_cmd_conform, &keel_cmd_bench,
    &keel_cmd_report,
    &keel_cmd_infer, &keel_cmd_export_onnx, &keel_cmd_import_onnx,
    &keel_cmd_version, &keel_cmd_help,
};
#define NCOMMANDS (sizeof(command_table) / sizeof(command_table[0]))

const keel_cli_command *keel_cli_find_command(const char *name)
{
    size_t i;

    for (i = 0; i < NCOMMANDS; i++)
        if (command_table[i] && strcmp(command_table[i]->name, name) == 0)
            return command_table[i];
    return NULL;
}

void keel_cli_print_usage(FILE *out)
{
    size_t i;

    fprintf(out, "usage: keel <command> [options]\n"
                 "       keel --help | --version\n\n"
                 "commands:\n");
    for (i = 0; i < NCOMMANDS; i++)
        if (command_table[i])
            fprintf(out, "  %-12s %s\n", command_table[i]->name,
                    command_table[i]->summary);
    fprintf(out, "\nRun 'keel help <command>' for a command's options.\n");
}

void keel_cli_print_command_help(FILE *out, const keel_cli_command *cmd)
{
    fprintf(out, "usage: keel %s%s%s\n\n%s", cmd->name,
            cmd->synopsis[0] ? " " : "", cmd->synopsis, cmd->help);
}

int keel_cli_usage_error(const keel_cli_command *cmd, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "keel %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: keel %s%s%s\nRun 'keel help %s' for details.\n",
            cmd->name, cmd->synopsis[0] ? " " : "", cmd->synopsis,
            cmd->name);
    return KEEL_EXIT_USAGE;
}

int keel_cli_runtime_error(const keel_cli_command *cmd, const char *what,
                           keel_status status)
{
    const char *msg = keel_last_error();

    fprintf(stderr, "keel %s: %s: %s%s%s\n", cmd->name, what,
            keel_status_name(status), msg[0] ? ": " : "", msg);
    return KEEL_EXIT_ERROR;
}

/* ---- keel help ----------------------------------------------------------- */

static int cmd_help_run(int argc, char **argv)
{
    const keel_cli_command *cmd;

    if (argc > 2)
        return keel_cli_usage_error(&keel_cmd_help,
                                    "expected at most one command name");
    if (argc == 1) {
        keel_cli_print_usage(stdout);
        return KEEL_EXIT_OK;
    }
    cmd = keel_cli_find_command(argv[1]);
    if (!cmd)
        return keel_cli_usage_error(&keel_cmd_help, "unknown command '%s'",
                                    argv[1]);
    keel_cli_print_command_help(stdout, cmd);
    return KEEL_EXIT_OK;
}

const keel_cli_command keel_cmd_help = {
    .name = "help",
    .synopsis = "[COMMAND]",
    .summary = "show the command list, or one command's help",
    .help = "Without COMMAND, list the commands. With COMMAND, print its\n"
            "options and exit statuses. 'keel COMMAND --help' does the same.\n",
    .run = cmd_help_run,
};

/* ---- main ---------------------------------------------------------------- */

/* true when a --help / -h appears among a command's arguments (before --). */
static int wants_help(int argc, char **argv)
{
    int i;

    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            return 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const keel_cli_command *cmd;
    const char *name;
    int rc;

    if (argc < 2) {
        keel_cli_print_usage(stderr);
        return KEEL_EXIT_USAGE;
    }
    name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        keel_cli_print_usage(stdout);
        return KEEL_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0)
        name = "version";
    cmd = keel_cli_find_command(name);
    if (!cmd) {
        fprintf(stderr, "keel: unknown %s '%s'\n\n",
                name[0] == '-' ? "option" : "command", name);
        keel_cli_print_usage(stderr);
        return KEEL_EXIT_USAGE;
    }
    if (wants_help(argc - 1, argv + 1)) {
        keel_cli_print_command_help(stdout, cmd);
        return KEEL_EXIT_OK;
    }

    rc = cmd->run(argc - 1, argv + 1);

    /* A failed write (a full disk, a closed pipe) must not look like success. */
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "keel %s: error writing to standard output\n",
                cmd->name);
        rc = KEEL_EXIT_ERROR;
    }
    return rc;
}
