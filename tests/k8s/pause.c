/*
 * pause.c — the Pod sandbox ("pause") process of the Kubernetes testbed.
 *
 * Every Pod's sandbox container runs one of these: it holds the Pod's
 * namespaces, reaps the orphans it inherits as PID 1, and exits on SIGINT or
 * SIGTERM. The testbed builds it statically (musl) and wraps it into an OCI
 * image offline (scripts/k8s-testbed.sh), because no registry can be reached
 * here. It does what Kubernetes' own build/pause/linux/pause.c does.
 */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_exit_signal(int sig)
{
        (void)sig;
        _exit(0);
}

static void on_child(int sig)
{
        (void)sig;
        while (waitpid(-1, NULL, WNOHANG) > 0)
                ;
}

int main(void)
{
        struct sigaction stop = {.sa_handler = on_exit_signal};
        struct sigaction reap = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};

        if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
            sigaction(SIGCHLD, &reap, NULL) < 0)
                return 1;
        for (;;)
                pause();
}
