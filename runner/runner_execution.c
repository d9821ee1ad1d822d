/* runner_execution.c — the runner's executions (part of sandboxd-runner; see
 * sandboxd-runner.c for the loop and the connection). Each runs under a
 * shim of its own:
 *
 *   runner ─ shim (child subreaper) ─ leader (setsid: own session and group)
 *                                      └ every descendant, however it forks
 *
 * Orphans of an execution reparent to its shim, never to the runner, so
 * "the execution's processes" is exactly "the shim's descendants" and a
 * signal reaches every one of them: double-forked, setsid and `env -i`
 * processes included. The shim reports the leader's wait status and the
 * rusage of everything it reaped, then keeps reaping until its subtree is
 * empty.
 *
 * Every buffer is bounded: output is read from a pipe only while the
 * execution's retained buffer (RP_RETAIN_CAP per stream, RETAIN_TOTAL in
 * all) has room, so a process whose output cannot be delivered blocks in
 * write() instead of losing bytes.
 *
 * Durable executions: an execution outlives the daemon's connection. Its
 * output is kept from the daemon's last RP_ACK on, its exit status until
 * RP_FORGET; after a reconnect the runner lists what it holds (RP_JOB) and
 * the daemon resumes each one at the byte it had persisted (RP_RESUME).
 *
 * Terminals: an RP_EXEC_TTY execution runs on a pseudo-terminal the runner
 * opens itself (posix_openpt on the container's /dev/ptmx), made the
 * controlling terminal of the leader's session.
 *
 * Single-threaded: everything here runs on the main poll loop. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "runner_ext.h"
#include "runner_io.h"
#include "sandboxd/runner_proto.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

#define MAX_JOBS RP_MAX_JOBS
#define RETAIN_TOTAL (16 * 1024 * 1024) /* unacknowledged output of all executions together */
#define STDIN_CAP (2 * RP_STDIN_WINDOW)
#define DRAIN_MS 200 /* output still read after the leader exited */

/* One output stream's bytes the daemon has not acknowledged yet. */
struct ostream {
        char *buf;
        size_t len, size;
        uint64_t base; /* stream offset of buf[0]: the daemon persisted everything before it */
        uint64_t sent; /* next offset to frame on the current connection */
};

struct job {
        bool used;
        bool exit_sent;   /* RP_EXIT went out on the current connection */
        bool have_status; /* the shim reported the leader's end */
        bool finished;    /* leader ended and output drained: later output is discarded */
        bool adopted;     /* started or resumed on the current connection: frames about it may go out */
        bool forgotten;   /* RP_FORGET: nothing more is reported; freed once its pipes close */
        bool shim_gone;
        uint32_t tag;
        pid_t shim;
        int out[2]; /* read ends of stdout/stderr (a tty: out[0] is the terminal, out[1] -1) */
        int in;     /* write end of stdin, -1 if none */
        int status; /* read end of the shim's report */
        int pty;    /* the terminal's master side, -1 without a tty */
        char *inq;
        size_t inq_len, inq_off;
        size_t in_old; /* queued stdin from an earlier connection: written, never acknowledged */
        bool in_eof;
        int64_t exited_at;
        struct rp_exit ex;
        struct ostream os[2];
        char code_path[256];
};

static struct job jobs[MAX_JOBS];
static size_t retained_total;

static struct job *job_find(uint32_t tag)
{
        for (int i = 0; i < MAX_JOBS; i++)
                if (jobs[i].used && jobs[i].tag == tag && !jobs[i].forgotten)
                        return &jobs[i];
        return NULL;
}

static void job_close_fd(int *fd)
{
        if (*fd >= 0)
                close(*fd);
        *fd = -1;
}

static void ostream_release(struct ostream *o)
{
        retained_total -= o->len;
        free(o->buf);
        memset(o, 0, sizeof(*o));
}

static void job_free(struct job *j)
{
        job_close_fd(&j->out[0]);
        job_close_fd(&j->out[1]);
        job_close_fd(&j->in);
        job_close_fd(&j->status);
        job_close_fd(&j->pty);
        ostream_release(&j->os[0]);
        ostream_release(&j->os[1]);
        free(j->inq);
        memset(j, 0, sizeof(*j));
        j->out[0] = j->out[1] = j->in = j->status = j->pty = -1;
}

static void job_resize(struct job *j, const unsigned char *p, size_t len)
{
        struct rp_winsize w;
        struct winsize ws;

        if (j->pty < 0 || len != sizeof(w))
                return;
        memcpy(&w, p, sizeof(w));
        if (!pty_winsize_ok(w.rows, w.cols))
                return;
        ws = (struct winsize){.ws_row = w.rows, .ws_col = w.cols};
        (void)ioctl(j->pty, TIOCSWINSZ, &ws); /* the kernel sends SIGWINCH to its foreground group */
}

/* Parse an RP_EXEC payload and start it. Every length is checked. */
static void job_start(uint32_t tag, uint16_t flags, const unsigned char *p, size_t len)
{
        struct rp_exec hdr;
        const char *s, *end, *workdir, *code_path;
        char **argv = NULL, **envp = NULL;
        int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pst[2] = {-1, -1};
        int ptm = -1, pts = -1;
        bool tty = flags & RP_EXEC_TTY;
        struct job *j = NULL;
        size_t nenv_base = 0;
        extern char **environ;
        pid_t shim;

        if (len < sizeof(hdr)) {
                send_failed(tag, EINVAL, "short exec frame");
                return;
        }
        memcpy(&hdr, p, sizeof(hdr));
        if (hdr.argc < 1 || hdr.argc > RP_MAX_ARGS || hdr.envc > RP_MAX_ARGS || hdr.code_len > len ||
            (tty && !pty_winsize_ok(hdr.winsize >> 16, hdr.winsize & 0xffff))) {
                send_failed(tag, EINVAL, "bad exec header");
                return;
        }
        if (job_find(tag)) {
                send_failed(tag, EEXIST, "tag in use");
                return;
        }
        for (int i = 0; i < MAX_JOBS && !j; i++)
                if (!jobs[i].used)
                        j = &jobs[i];
        if (!j) {
                send_failed(tag, EBUSY, "too many executions in this container");
                return;
        }
        s = (const char *)p + sizeof(hdr);
        end = (const char *)p + len - hdr.code_len;
        if (s > end) {
                send_failed(tag, EINVAL, "bad exec lengths");
                return;
        }
        while (environ && environ[nenv_base])
                nenv_base++;
        argv = calloc(hdr.argc + 1, sizeof(char *));
        envp = calloc(nenv_base + hdr.envc + 1, sizeof(char *));
        if (!argv || !envp)
                goto nomem;
        /* strings: workdir, code_path, argv..., env... — each must end inside the frame */
        {
                const char **slots[2] = {&workdir, &code_path};
                size_t total = 2 + hdr.argc + hdr.envc, k = 0;
                for (; k < total; k++) {
                        const char *z = memchr(s, '\0', (size_t)(end - s));
                        if (!z) {
                                send_failed(tag, EINVAL, "unterminated string in exec frame");
                                goto out;
                        }
                        if (k < 2)
                                *slots[k] = s;
                        else if (k < 2 + hdr.argc)
                                argv[k - 2] = (char *)s;
                        else
                                envp[nenv_base + (k - 2 - hdr.argc)] = (char *)s;
                        s = z + 1;
                }
        }
        /* container environment first, minus what the request overrides */
        {
                size_t w = 0;
                for (size_t b = 0; b < nenv_base; b++) {
                        const char *eq = strchr(environ[b], '=');
                        size_t kl = eq ? (size_t)(eq - environ[b]) + 1 : strlen(environ[b]);
                        bool over = false;
                        for (uint32_t e = 0; e < hdr.envc && !over; e++)
                                over = strncmp(envp[nenv_base + e], environ[b], kl) == 0;
                        if (!over)
                                envp[w++] = environ[b];
                }
                for (uint32_t e = 0; e < hdr.envc; e++)
                        envp[w++] = envp[nenv_base + e];
                envp[w] = NULL;
        }
        if (workdir[0] != '/' || strlen(code_path) >= sizeof(j->code_path)) {
                send_failed(tag, EINVAL, "bad workdir or code path");
                goto out;
        }
        if (code_path[0]) {
                int fd = open(code_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
                if (fd < 0) {
                        send_failed(tag, errno, "cannot create the code file");
                        goto out;
                }
                if (rio_write_full(fd, end, hdr.code_len) < 0) {
                        close(fd);
                        unlink(code_path);
                        send_failed(tag, EIO, "cannot write the code file");
                        goto out;
                }
                close(fd);
        }
        if (tty) {
                if (pty_open((uint16_t)(hdr.winsize >> 16), (uint16_t)(hdr.winsize & 0xffff), &ptm, &pts) < 0) {
                        send_failed(tag, errno, "cannot open a pseudo-terminal");
                        goto fail_fds;
                }
                /* the leader's stdin, stdout and stderr are all the terminal */
                pin[0] = pts;
                pout[1] = pts;
                perr[1] = pts;
                pts = -1;
        }
        if ((!tty && (pipe2(pout, O_CLOEXEC) < 0 || pipe2(perr, O_CLOEXEC) < 0)) || pipe2(pst, O_CLOEXEC) < 0 ||
            (!tty && (flags & RP_EXEC_STDIN) && pipe2(pin, O_CLOEXEC) < 0)) {
                send_failed(tag, errno, "cannot make pipes");
                goto fail_fds;
        }
        shim = fork();
        if (shim < 0) {
                send_failed(tag, errno, "cannot fork");
                goto fail_fds;
        }
        if (shim == 0) {
                int devnull = -1;
                pid_t leader;
                signal(SIGCHLD, SIG_DFL); /* the runner's handler writes to a pipe the shim does not have */
                prctl(PR_SET_CHILD_SUBREAPER, 1);
                if (pin[0] < 0)
                        pin[0] = devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
                /* stdio of the leader at 0..2, the report pipe at 3, nothing else */
                int keep[4] = {fcntl(pin[0], F_DUPFD_CLOEXEC, 10), fcntl(pout[1], F_DUPFD_CLOEXEC, 10),
                               fcntl(perr[1], F_DUPFD_CLOEXEC, 10), fcntl(pst[1], F_DUPFD_CLOEXEC, 10)};
                for (int i = 0; i < 4; i++)
                        if (keep[i] < 0 || dup2(keep[i], i) < 0)
                                _exit(125);
                syscall(SYS_close_range, 4u, ~0u, 0u);
                (void)devnull;
                leader = fork();
                if (leader < 0)
                        _exit(125);
                if (leader == 0)
                        proc_leader_exec(workdir, argv, envp, tty);
                close(0);
                close(1);
                close(2);
                proc_shim_main(leader);
        }
        close(pst[1]);
        if (tty) {
                close(pout[1]); /* the one slave fd: pin[0] and perr[1] are the same */
        } else {
                close(pout[1]);
                close(perr[1]);
                if (pin[0] >= 0)
                        close(pin[0]);
        }
        memset(j, 0, sizeof(*j));
        j->used = true;
        j->adopted = true;
        j->tag = tag;
        j->shim = shim;
        runner_net_shim(shim, tag, flags & RP_EXEC_NARROWED, true);
        j->status = pst[0];
        j->pty = -1;
        if (tty) {
                /* one open terminal, three fds: output, input (closed at EOF), window size */
                j->pty = ptm;
                j->out[0] = fcntl(ptm, F_DUPFD_CLOEXEC, 3);
                j->out[1] = -1;
                j->in = fcntl(ptm, F_DUPFD_CLOEXEC, 3);
        } else {
                j->out[0] = pout[0];
                j->out[1] = perr[0];
                j->in = pin[1];
        }
        if (j->in >= 0)
                fcntl(j->in, F_SETFL, O_NONBLOCK);
        if (j->out[0] >= 0)
                fcntl(j->out[0], F_SETFL, O_NONBLOCK);
        if (j->out[1] >= 0)
                fcntl(j->out[1], F_SETFL, O_NONBLOCK);
        snprintf(j->code_path, sizeof(j->code_path), "%s", code_path);
        {
                uint32_t pid = (uint32_t)shim;
                send_frame(RP_STARTED, 0, tag, &pid, sizeof(pid), NULL, 0);
        }
        goto out;

fail_fds:
        if (ptm >= 0)
                close(ptm);
        if (tty) {
                if (pout[1] >= 0)
                        close(pout[1]); /* the slave, once */
                pin[0] = pout[1] = perr[1] = -1;
        }
        for (int i = 0; i < 2; i++) {
                if (pin[i] >= 0)
                        close(pin[i]);
                if (pout[i] >= 0)
                        close(pout[i]);
                if (perr[i] >= 0)
                        close(perr[i]);
                if (pst[i] >= 0)
                        close(pst[i]);
        }
        if (code_path[0])
                unlink(code_path);
        goto out;
nomem:
        send_failed(tag, ENOMEM, "out of memory");
out:
        free(argv);
        free(envp);
}

static void job_stdin_pump(struct job *j)
{
        while (j->in >= 0 && j->inq_off < j->inq_len) {
                ssize_t n = write(j->in, j->inq + j->inq_off, j->inq_len - j->inq_off);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return;
                        job_close_fd(&j->in); /* it closed its stdin: the rest can never be read */
                        break;
                }
                j->inq_off += (size_t)n;
                /* bytes queued before a reconnect belong to no window of the current daemon */
                size_t old = j->in_old < (size_t)n ? j->in_old : (size_t)n;
                j->in_old -= old;
                uint32_t ack = (uint32_t)((size_t)n - old);
                if (ack && j->adopted)
                        send_frame(RP_STDIN_ACK, 0, j->tag, &ack, sizeof(ack), NULL, 0);
        }
        if (j->inq_off == j->inq_len)
                j->inq_off = j->inq_len = 0;
        if (j->in_eof && j->inq_len == 0 && j->in >= 0) {
                if (j->pty >= 0 && write(j->in, "\x04", 1) < 0) {
                        /* a terminal has no end of input: ^D is its EOF; a full one cannot take it */
                }
                job_close_fd(&j->in);
        }
}

static void job_stdin(struct job *j, const unsigned char *p, size_t len, bool eof)
{
        if (eof) {
                j->in_eof = true;
        } else if (j->in >= 0) {
                if (j->inq_off > 0) {
                        memmove(j->inq, j->inq + j->inq_off, j->inq_len - j->inq_off);
                        j->inq_len -= j->inq_off;
                        j->inq_off = 0;
                }
                if (j->inq_len + len > STDIN_CAP)
                        return; /* the daemon keeps a smaller window: a broken daemon, drop it */
                char *q = realloc(j->inq, j->inq_len + len);
                if (!q)
                        return;
                memcpy(q + j->inq_len, p, len);
                j->inq = q;
                j->inq_len += len;
        }
        job_stdin_pump(j);
}

/* The shim's report: the leader's status and the tree's usage. */
static void job_read_status(struct job *j)
{
        struct {
                int status;
                struct rusage ru;
        } rep;
        ssize_t n = read(j->status, &rep, sizeof(rep));

        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return;
        job_close_fd(&j->status);
        if (n != (ssize_t)sizeof(rep)) {
                /* the shim died before it could report (killed): no usage known */
                memset(&rep, 0, sizeof(rep));
                rep.status = SIGKILL;
        }
        if (WIFEXITED(rep.status)) {
                j->ex.exit_code = WEXITSTATUS(rep.status);
        } else if (WIFSIGNALED(rep.status)) {
                j->ex.signal = WTERMSIG(rep.status);
                j->ex.exit_code = 128 + j->ex.signal;
        }
        j->ex.utime_us = (uint64_t)rep.ru.ru_utime.tv_sec * 1000000 + (uint64_t)rep.ru.ru_utime.tv_usec;
        j->ex.stime_us = (uint64_t)rep.ru.ru_stime.tv_sec * 1000000 + (uint64_t)rep.ru.ru_stime.tv_usec;
        j->ex.maxrss_kb = (uint64_t)rep.ru.ru_maxrss;
        j->have_status = true;
        j->exited_at = now_ms();
        job_close_fd(&j->in);
}

/* Output is kept until the daemon acknowledges it; a finished or forgotten
 * execution's late output (background processes) is read and discarded. */
static size_t job_read_room(const struct job *j, int k)
{
        size_t room = RP_RETAIN_CAP - j->os[k].len;

        if (j->finished || j->forgotten)
                return RP_CHUNK;
        if (RETAIN_TOTAL - retained_total < room)
                room = RETAIN_TOTAL - retained_total;
        return room < RP_CHUNK ? room : RP_CHUNK;
}

static void job_read_output(struct job *j, int k)
{
        static char buf[RP_CHUNK];
        struct ostream *o = &j->os[k];
        size_t want = job_read_room(j, k);
        ssize_t n;

        if (want == 0)
                return;
        n = read(j->out[k], buf, want);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return;
        if (n <= 0) {
                job_close_fd(&j->out[k]); /* end of file; a terminal gives EIO once every slave fd closed */
                return;
        }
        if (j->finished || j->forgotten)
                return;
        if (o->len + (size_t)n > o->size) {
                size_t size = o->size ? 2 * o->size : 16 * 1024;
                while (size < o->len + (size_t)n)
                        size *= 2;
                if (size > RP_RETAIN_CAP)
                        size = RP_RETAIN_CAP;
                char *b = realloc(o->buf, size);
                if (!b)
                        return; /* cannot happen within the caps; the bytes are lost, never overrun */
                o->buf = b;
                o->size = size;
        }
        memcpy(o->buf + o->len, buf, (size_t)n);
        o->len += (size_t)n;
        retained_total += (size_t)n;
}

/* Frame what the current connection has not been sent yet, while the
 * outgoing buffer has room. */
static void job_send_output(struct job *j)
{
        if (!connected() || !j->adopted || j->forgotten)
                return;
        for (int k = 0; k < 2; k++) {
                struct ostream *o = &j->os[k];
                while (o->sent < o->base + o->len && out_room(RP_HDR_LEN + RP_CHUNK)) {
                        uint64_t left = o->base + o->len - o->sent;
                        size_t n = left < RP_CHUNK ? (size_t)left : RP_CHUNK;
                        send_frame(RP_OUTPUT, k ? RP_OUT_STDERR : 0, j->tag, o->buf + (o->sent - o->base), n, NULL, 0);
                        o->sent += n;
                }
        }
}

/* Drop what the daemon has persisted: offsets up to what was framed. */
static void ostream_ack(struct ostream *o, uint64_t off)
{
        size_t drop;

        if (off > o->sent)
                off = o->sent;
        if (off <= o->base)
                return;
        drop = (size_t)(off - o->base);
        memmove(o->buf, o->buf + drop, o->len - drop);
        o->len -= drop;
        o->base = off;
        retained_total -= drop;
        if (o->len == 0 && o->size > 64 * 1024) {
                free(o->buf);
                o->buf = NULL;
                o->size = 0;
        }
}

/* The leader ended and its output is drained (or the drain time is up: a
 * background process may hold the pipes for ever) — then RP_EXIT, once all
 * kept output went out on this connection. */
static void job_maybe_finish(struct job *j)
{
        if (j->have_status && !j->finished) {
                for (int k = 0; k < 2; k++)
                        if (j->out[k] >= 0 && job_read_room(j, k) == 0)
                                j->exited_at = now_ms(); /* its output waits for the daemon: no drain deadline yet */
                if ((j->out[0] < 0 && j->out[1] < 0) || now_ms() - j->exited_at >= DRAIN_MS) {
                        j->finished = true;
                        if (j->code_path[0])
                                unlink(j->code_path);
                }
        }
        if (j->finished && j->adopted && !j->forgotten && !j->exit_sent && connected() &&
            j->os[0].sent == j->os[0].base + j->os[0].len && j->os[1].sent == j->os[1].base + j->os[1].len &&
            out_room(RP_HDR_LEN + sizeof(j->ex))) {
                send_frame(RP_EXIT, 0, j->tag, &j->ex, sizeof(j->ex), NULL, 0);
                j->exit_sent = true;
        }
        /* lingering background processes keep their pipes; read and discard until they close */
        if (j->forgotten && j->out[0] < 0 && j->out[1] < 0 && j->shim_gone)
                job_free(j);
}

/* ---- durable executions ---- */

/* After RP_HELLO: every execution still held, then the end of the list. */
void exec_connected(void)
{
        for (int i = 0; i < MAX_JOBS; i++) {
                struct job *j = &jobs[i];
                struct rp_job r;
                if (!j->used || j->forgotten)
                        continue;
                r = (struct rp_job){.pid = (uint32_t)j->shim, .flags = j->finished ? RP_JOB_EXITED : 0};
                for (int k = 0; k < 2; k++) {
                        r.produced[k] = j->os[k].base + j->os[k].len;
                        r.acked[k] = j->os[k].base;
                }
                send_frame(RP_JOB, 0, j->tag, &r, sizeof(r), NULL, 0);
        }
        send_frame(RP_JOBS_END, 0, 0, NULL, 0, NULL, 0);
}

/* The connection is gone: nothing is adopted until the next daemon resumes it. */
void exec_disconnected(void)
{
        for (int i = 0; i < MAX_JOBS; i++) {
                struct job *j = &jobs[i];
                if (!j->used)
                        continue;
                j->adopted = false;
                j->exit_sent = false;
                j->in_old = j->inq_len - j->inq_off;
        }
}

/* RP_RESUME: output goes on from what the daemon has, within what is kept. */
static void job_resume(struct job *j, uint32_t tag, const unsigned char *p, size_t len)
{
        struct rp_offsets have;

        if (!j) {
                send_failed(tag, ENOENT, "no such execution to resume");
                return;
        }
        if (len != sizeof(have) || j->adopted)
                return;
        memcpy(&have, p, sizeof(have));
        for (int k = 0; k < 2; k++) {
                struct ostream *o = &j->os[k];
                uint64_t end = o->base + o->len, at = have.off[k];
                if (at < o->base)
                        at = o->base;
                if (at > end)
                        at = end;
                o->sent = end; /* let the ack below drop what the daemon already has */
                ostream_ack(o, at);
                o->sent = at;
        }
        j->in_old = j->inq_len - j->inq_off;
        j->adopted = true;
}

static void job_ack(struct job *j, const unsigned char *p, size_t len)
{
        struct rp_offsets a;

        if (!j->adopted || len != sizeof(a))
                return;
        memcpy(&a, p, sizeof(a));
        ostream_ack(&j->os[0], a.off[0]);
        ostream_ack(&j->os[1], a.off[1]);
}

/* RP_FORGET: the daemon recorded its end, or will never adopt it. */
static void job_forget(struct job *j)
{
        if (!j->have_status)
                tree_kill(j->shim, SIGKILL); /* nobody will ever read its result */
        j->forgotten = true;
        ostream_release(&j->os[0]);
        ostream_release(&j->os[1]);
        job_close_fd(&j->in);
}

/* ---- the loop's side ---- */

void exec_init(void)
{
        for (int i = 0; i < MAX_JOBS; i++)
                jobs[i].out[0] = jobs[i].out[1] = jobs[i].in = jobs[i].status = jobs[i].pty = -1;
}

void exec_frame(const struct rp_hdr *h, const unsigned char *p)
{
        struct job *j = h->tag ? job_find(h->tag) : NULL;

        switch (h->type) {
        case RP_EXEC:
                job_start(h->tag, h->flags, p, h->len);
                break;
        case RP_STDIN:
        case RP_STDIN_EOF:
                if (j && j->adopted)
                        job_stdin(j, p, h->len, h->type == RP_STDIN_EOF);
                break;
        case RP_SIGNAL:
                if (j && h->len == 4) {
                        uint32_t sig;
                        memcpy(&sig, p, 4);
                        if (sig == SIGTERM || sig == SIGKILL || sig == SIGINT || sig == SIGHUP)
                                tree_kill(j->shim, (int)sig);
                }
                break;
        case RP_RESUME:
                job_resume(j, h->tag, p, h->len);
                break;
        case RP_ACK:
        case RP_FORGET:
        case RP_RESIZE:
                if (!j)
                        break;
                if (h->type == RP_ACK)
                        job_ack(j, p, h->len);
                else if (h->type == RP_FORGET)
                        job_forget(j);
                else
                        job_resize(j, p, h->len);
                break;
        default:
                break;
        }
}

void exec_reaped(pid_t pid)
{
        for (int i = 0; i < MAX_JOBS; i++)
                if (jobs[i].used && jobs[i].shim == pid)
                        jobs[i].shim_gone = true;
        runner_net_shim(pid, 0, false, false); /* an execution's or a service's: its pid may be reused */
}

nfds_t exec_poll_fill(struct pollfd *pfd, struct exec_pollref *who, int64_t now, int64_t *timeout)
{
        nfds_t n = 0;

        for (int i = 0; i < MAX_JOBS; i++) {
                struct job *j = &jobs[i];
                if (!j->used)
                        continue;
                for (int k = 0; k < 2; k++)
                        /* a full buffer leaves the pipe unread: the writer blocks, nothing is lost */
                        if (j->out[k] >= 0 && job_read_room(j, k) > 0) {
                                pfd[n] = (struct pollfd){.fd = j->out[k], .events = POLLIN};
                                who[n].j = j;
                                who[n++].what = k;
                        }
                if (j->status >= 0) {
                        pfd[n] = (struct pollfd){.fd = j->status, .events = POLLIN};
                        who[n].j = j;
                        who[n++].what = 2;
                }
                if (j->in >= 0 && j->inq_len > j->inq_off) {
                        pfd[n] = (struct pollfd){.fd = j->in, .events = POLLOUT};
                        who[n].j = j;
                        who[n++].what = 3;
                }
                if (j->have_status && !j->finished) {
                        int64_t left = j->exited_at + DRAIN_MS - now;
                        if (left < *timeout)
                                *timeout = left > 0 ? left : 0;
                }
        }
        return n;
}

void exec_poll_ready(const struct exec_pollref *who, const struct pollfd *pfd)
{
        struct job *j = who->j;

        if (!j->used)
                return;
        if (who->what < 2 && j->out[who->what] == pfd->fd)
                job_read_output(j, who->what);
        else if (who->what == 2 && j->status == pfd->fd)
                job_read_status(j);
        else if (who->what == 3 && j->in == pfd->fd)
                job_stdin_pump(j);
}

void exec_tick(void)
{
        for (int i = 0; i < MAX_JOBS; i++)
                if (jobs[i].used) {
                        job_send_output(&jobs[i]);
                        job_maybe_finish(&jobs[i]);
                }
}
