/* test_token.c — API tokens: creation, digest-only storage, verification,
 * revocation, listing; and the line reader's hard cap (listener.c). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/listener.h"
#include "sandboxd/sha256.h"
#include "sandboxd/store.h"
#include "sandboxd/token.h"
#include "testenv.h"

static struct store *st;

static void setup(void)
{
        char *dir = testenv_tmpdir(), db[4096];
        struct sbx_error err = {0};
        snprintf(db, sizeof(db), "%s/t.db", dir);
        free(dir);
        cr_assert_eq(store_open(db, &st, &err), 0, "%s", err.msg);
}

static void teardown(void)
{
        store_close(st);
        st = NULL;
}

TestSuite(token, .init = setup, .fini = teardown);

Test(token, create_verify_revoke)
{
        char tok[TOKEN_LEN + 1], tok2[TOKEN_LEN + 1], digest[65];
        struct token_info info, got;
        struct store_token row;
        struct sbx_error err = {0};

        cr_assert_eq(token_create(st, "alice", TOKEN_ROLE_CONNECTOR, tok, &info, &err), 0, "%s", err.msg);
        cr_assert_eq(strlen(tok), TOKEN_LEN);
        cr_assert_eq(strncmp(tok, "sbx_", 4), 0);
        cr_assert_eq(strlen(info.id), TOKEN_ID_LEN);
        cr_assert_eq(info.role, TOKEN_ROLE_CONNECTOR);

        /* only the digest is stored */
        sha256_hex(tok, TOKEN_LEN, digest);
        cr_assert_eq(store_token_get_by_digest(st, digest, &row), 0);
        cr_assert_str_eq(row.id, info.id);
        cr_assert_null(strstr(row.token_sha256, tok + 4));

        cr_assert_eq(token_verify(st, tok, &got), 0);
        cr_assert_str_eq(got.user, "alice");
        cr_assert_str_eq(got.id, info.id);

        /* near misses */
        memcpy(tok2, tok, sizeof(tok2));
        tok2[10] = tok2[10] == '0' ? '1' : '0';
        cr_assert_eq(token_verify(st, tok2, &got), -EACCES);
        cr_assert_eq(token_verify(st, "sbx_", &got), -EACCES);
        cr_assert_eq(token_verify(st, "", &got), -EACCES);
        cr_assert_eq(token_verify(st, NULL, &got), -EACCES);
        tok2[10] = 'G';
        cr_assert_eq(token_verify(st, tok2, &got), -EACCES);
        memcpy(tok2, tok, sizeof(tok2));
        tok2[0] = 'x';
        cr_assert_eq(token_verify(st, tok2, &got), -EACCES);
        /* the digest itself is not a token */
        cr_assert_eq(token_verify(st, digest, &got), -EACCES);

        cr_assert_eq(token_revoke(st, info.id, &err), 0);
        cr_assert_eq(token_verify(st, tok, &got), -EACCES);
        cr_assert_eq(token_revoke(st, info.id, &err), -EALREADY);
        cr_assert_eq(token_revoke(st, "0000", &err), -ENOENT);
}

Test(token, list_and_bad_input)
{
        char tok[TOKEN_LEN + 1];
        struct token_info *list = NULL;
        size_t n = 0;
        enum token_role role;

        cr_assert_eq(token_create(st, "a", TOKEN_ROLE_AGENT, tok, NULL, NULL), 0);
        cr_assert_eq(token_create(st, "b", TOKEN_ROLE_CONNECTOR, tok, NULL, NULL), 0);
        /* the store takes the operator role (migration 0034) */
        cr_assert_eq(token_create(st, "ops", TOKEN_ROLE_OPERATOR, tok, NULL, NULL), 0);
        cr_assert_eq(token_create(st, "bad user", TOKEN_ROLE_AGENT, tok, NULL, NULL), -EINVAL);
        cr_assert_eq(token_create(st, "", TOKEN_ROLE_AGENT, tok, NULL, NULL), -EINVAL);
        cr_assert_eq(token_create(st, "x", (enum token_role)7, tok, NULL, NULL), -EINVAL);
        cr_assert_eq(token_list(st, &list, &n), 0);
        cr_assert_eq(n, 3);
        cr_assert_str_eq(list[0].user, "a");
        cr_assert_eq(list[1].role, TOKEN_ROLE_CONNECTOR);
        cr_assert_eq(list[2].role, TOKEN_ROLE_OPERATOR);
        free(list);
        cr_assert_eq(token_role_from_string("agent", &role), 0);
        cr_assert_eq(role, TOKEN_ROLE_AGENT);
        cr_assert_eq(token_role_from_string("operator", &role), 0);
        cr_assert_eq(role, TOKEN_ROLE_OPERATOR);
        cr_assert_eq(token_role_from_string("admin", &role), -EINVAL);
        cr_assert(token_equal_ct("abc", "abc", 3));
        cr_assert_not(token_equal_ct("abc", "abd", 3));
}

Test(linereader, hard_cap_and_eof, .init = NULL, .fini = NULL)
{
        int sv[2];
        struct linereader lr;
        char *line;
        size_t len;
        char big[200];

        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        linereader_init(&lr, sv[0], 100);
        cr_assert_eq(write(sv[1], "one\ntwo\n", 8), 8);
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), 1);
        cr_assert_str_eq(line, "one");
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), 1);
        cr_assert_str_eq(line, "two");
        cr_assert_eq(linereader_next(&lr, &line, &len, 100, -1), -ETIMEDOUT);
        /* exactly the cap is fine; one more byte is not, and nothing past max+2 is buffered */
        memset(big, 'x', 100);
        big[100] = '\n';
        cr_assert_eq(write(sv[1], big, 101), 101);
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), 1);
        cr_assert_eq(len, 100);
        memset(big, 'y', sizeof(big));
        cr_assert_eq(write(sv[1], big, sizeof(big)), (ssize_t)sizeof(big));
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), -E2BIG);
        cr_assert_leq(lr.cap, 102);
        linereader_done(&lr);

        /* a last line without '\n' is handed out at EOF */
        linereader_init(&lr, sv[0], 100);
        {
                char drain[512];
                while (recv(sv[0], drain, sizeof(drain), MSG_DONTWAIT) > 0)
                        ;
        }
        cr_assert_eq(write(sv[1], "tail", 4), 4);
        close(sv[1]);
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), 1);
        cr_assert_str_eq(line, "tail");
        cr_assert_eq(linereader_next(&lr, &line, &len, 1000, -1), 0);
        linereader_done(&lr);
        close(sv[0]);
}

Test(linereader, stop_fd_cancels, .init = NULL, .fini = NULL)
{
        int sv[2], stop[2];
        struct linereader lr;
        char *line;
        size_t len;

        cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        cr_assert_eq(pipe(stop), 0);
        linereader_init(&lr, sv[0], 100);
        cr_assert_eq(write(stop[1], "x", 1), 1);
        cr_assert_eq(linereader_next(&lr, &line, &len, -1, stop[0]), -ECANCELED);
        linereader_done(&lr);
        close(sv[0]);
        close(sv[1]);
        close(stop[0]);
        close(stop[1]);
}
