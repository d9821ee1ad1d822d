/* cli.c — the executables' shared argument cases (cli.h). No state, no
 * threads. */
#include "sandboxd/cli.h"

#include <getopt.h>

#include "sandboxd/common.h"

int cli_usual_option(int c, const char *prog, void (*usage)(FILE *f))
{
        switch (c) {
        case 'V':
                printf("%s %s\n", prog, SBX_VERSION);
                return 0;
        case 'h':
                usage(stdout);
                return 0;
        default:
                usage(stderr);
                return 2;
        }
}

int cli_no_operands(int argc, char *const argv[], const char *prog, void (*usage)(FILE *f))
{
        if (optind >= argc)
                return 0;
        fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
        usage(stderr);
        return 2;
}
