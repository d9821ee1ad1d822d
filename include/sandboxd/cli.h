/* cli.h — what the executables in src/bin/ share when they parse their
 * arguments: the -V, -h and unknown-option cases of a getopt loop, and
 * refusing operands. */
#ifndef SANDBOXD_CLI_H
#define SANDBOXD_CLI_H

#include <stdio.h>

/* getopt's c, none of the program's own options: 'V' prints "<prog>
 * <version>", 'h' the usage on stdout, anything else the usage on stderr.
 * Returns the exit status (0, or 2 for a bad option) to return now. */
int cli_usual_option(int c, const char *prog, void (*usage)(FILE *f));
/* 0 when nothing follows the options (optind), else 2 after saying so
 * with the usage on stderr. */
int cli_no_operands(int argc, char *const argv[], const char *prog, void (*usage)(FILE *f));

#endif
