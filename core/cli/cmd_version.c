/*
 * keel version — print keel's version and the device ABI version.
 */
#include "cli.h"

static int cmd_version_run(int argc, char **argv)
{
    if (argc > 1)
        return keel_cli_usage_error(&keel_cmd_version,
                                    "unexpected argument '%s'", argv[1]);
    printf("keel %s\n", keel_version());
    printf("device ABI %d.%d (loads plugins built against ABI %d.x)\n",
           KEEL_ABI_VERSION_MAJOR, KEEL_ABI_VERSION_MINOR,
           KEEL_ABI_VERSION_MAJOR);
    return KEEL_EXIT_OK;
}

const keel_cli_command keel_cmd_version = {
    .name = "version",
    .synopsis = "",
    .summary = "print the keel and device ABI versions",
    .help = "Print keel's version and the device ABI version it implements.\n"
            "Plugins built against any minor version of the same ABI major\n"
            "load.\n",
    .run = cmd_version_run,
};
