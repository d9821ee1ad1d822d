/* stress_listener.c — the served socket of the API and admin fronts
 * (listener.c's sockserver): its accept thread, one detached worker per
 * connection, the caps on connections, and a stop while connections are
 * live — started and stopped a few times over.
 *
 * Clients on many threads connect, send a line and read the answer: the
 * echo of the line, or a "busy" refusal once max_conns are open. Some keep
 * their connection open past the stop. What must hold: every answer is one
 * of the two, and the stop returns (it shuts live connections down and
 * waits for their workers) with every client seeing the end. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "listener.h"
#include "stress.h"

#define CLIENTS 8
#define MAX_CONNS 6
#define CYCLES 3

static char path[300];
static int echoed, refused; /* atomic */
static bool done;           /* atomic: every cycle is over */

static void echo_fn(struct sockserver *srv, int fd, const struct ucred *peer, void *ud)
{
        struct linereader lr;
        char *line;
        size_t len;

        (void)peer;
        (void)ud;
        linereader_init(&lr, fd, 256);
        while (linereader_next(&lr, &line, &len, 5000, sockserver_stop_fd(srv)) == 1) {
                line[len] = '\n';
                if (listener_send_all(fd, line, len + 1) < 0)
                        break;
        }
        linereader_done(&lr);
}

static int dial(void)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
                return fd;
        if (fd >= 0)
                close(fd);
        return -1;
}

/* One line back within 5 s, or "" at EOF. */
static void read_answer(int fd, char *buf, size_t size)
{
        size_t n = 0;

        while (n < size - 1) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                ssize_t k;
                if (poll(&p, 1, 5000) != 1)
                        break;
                k = read(fd, buf + n, 1);
                if (k <= 0 || buf[n] == '\n')
                        break;
                n += (size_t)k;
        }
        buf[n] = '\0';
}

static void client(int t, void *ud)
{
        (void)ud;
        for (int k = 0; !__atomic_load_n(&done, __ATOMIC_ACQUIRE); k++) {
                char want[64], got[256];
                int fd = dial();

                if (fd < 0) {
                        sbx_sleep_ms(1); /* not a wait: between a stop and the next start */
                        continue;
                }
                snprintf(want, sizeof(want), "client %d round %d", t, k);
                if (send(fd, want, strlen(want), MSG_NOSIGNAL) < 0 || send(fd, "\n", 1, MSG_NOSIGNAL) < 0) {
                        close(fd);
                        continue;
                }
                read_answer(fd, got, sizeof(got));
                if (strcmp(got, want) == 0)
                        __atomic_add_fetch(&echoed, 1, __ATOMIC_RELAXED);
                else if (strstr(got, "\"busy\""))
                        __atomic_add_fetch(&refused, 1, __ATOMIC_RELAXED);
                else
                        STRESS_CHECK(got[0] == '\0', "client %d: answer %s", t, got); /* "": the server stopped */
                if (k % 20) /* most go at once; some stay until the server shuts them down */
                        close(fd);
                else {
                        read_answer(fd, got, sizeof(got)); /* until EOF at the stop (or 5 s) */
                        close(fd);
                }
        }
}

static void *cycle_main(void *ud)
{
        (void)ud;
        stress_threads(CLIENTS, client, NULL);
        return NULL;
}

int main(void)
{
        pthread_t clients;

        snprintf(path, sizeof(path), "%s/run/stress.sock", stress_tmpdir());
        if (pthread_create(&clients, NULL, cycle_main, NULL) != 0)
                return 2;
        for (int c = 0; c < CYCLES; c++) {
                struct sbx_error err = {0};
                struct sockserver *srv = NULL;

                if (sockserver_start("stress", "sbx-stress", path, 0600, (gid_t)-1, MAX_CONNS, MAX_CONNS, 0, echo_fn,
                                     NULL, &srv, &err) < 0) {
                        fprintf(stderr, "stress_listener: start: %s\n", err.msg);
                        return 2;
                }
                /* not a wait: the clients' traffic runs against this server for a while */
                sbx_sleep_ms(stress_n(2000));
                sockserver_stop(srv);
        }
        __atomic_store_n(&done, true, __ATOMIC_RELEASE);
        pthread_join(clients, NULL);
        printf("stress_listener: %d echoed, %d refused busy\n", echoed, refused);
        STRESS_CHECK(echoed > 0, "nothing was echoed");
        return stress_done("stress_listener");
}
