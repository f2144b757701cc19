/*
 * test_error.c — errors as values (lib/error.h).
 *
 * A message longer than hy_error's buffer is cut in the middle, not at its
 * end: with a path of 4000 characters in it, the context before the path
 * and the reason after it both survive, joined by "...", through hy_fail
 * and through hy_error_prefix; the cut never splits a UTF-8 character;
 * short messages are kept whole; status and cause are kept. A message is
 * one line: a newline, an escape sequence, DEL or a C1 control (in UTF-8)
 * in what it quotes becomes '?', through hy_fail and hy_error_prefix, and
 * other UTF-8 stays.
 */
#include "error.h"
#include "test.h"

#include <string.h>

/* Whether s is valid UTF-8 (the cut must not leave half a character). */
static int utf8_ok(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 0 : (*p & 0xe0) == 0xc0 ? 1 : (*p & 0xf0) == 0xe0 ? 2 :
                (*p & 0xf8) == 0xf0 ? 3 : -1;
        if (n < 0) return 0;
        for (p++; n > 0; n--, p++)
            if ((*p & 0xc0) != 0x80) return 0;
    }
    return 1;
}

int main(void) {
    static char path[4001];
    hy_error err;
    /* A path of 4000 characters: 20 directories of 199 'a's. */
    for (int i = 0; i < 4000; i++) path[i] = i % 200 == 0 ? '/' : 'a';
    path[4000] = '\0';

    CHECK(hy_fail(&err, HY_ERR_INPUT, "model.layers in %s must be an integer in 1..1024, got 0",
                  path) == HY_ERR_INPUT);
    CHECK(err.status == HY_ERR_INPUT && err.cause == HY_CAUSE_NONE);
    CHECK(strlen(err.msg) < sizeof err.msg);
    CHECKF(!strncmp(err.msg, "model.layers in /aaa", 20), "%.60s", err.msg);
    CHECKF(strstr(err.msg, "aaa...aaa") != NULL, "%s", err.msg);
    size_t n = strlen(err.msg), tail = strlen("aaa must be an integer in 1..1024, got 0");
    CHECKF(n >= tail && !strcmp(err.msg + n - tail, "aaa must be an integer in 1..1024, got 0"),
           "the reason is lost: ...%s", n > 60 ? err.msg + n - 60 : err.msg);

    /* The same through a prefix added on the way up: the new context in
     * front, the reason still at the end. */
    hy_fail_cause(&err, HY_ERR_RUNTIME, HY_CAUSE_STOPPED, "%s: is not a regular file (a FIFO)",
                  path);
    hy_error_prefix(&err, "while resuming from %s: ", path);
    CHECK(err.status == HY_ERR_RUNTIME && err.cause == HY_CAUSE_STOPPED);
    CHECKF(!strncmp(err.msg, "while resuming from /aaa", 24), "%.60s", err.msg);
    n = strlen(err.msg);
    CHECKF(n > 30 && !strcmp(err.msg + n - 30, "is not a regular file (a FIFO)"), "%s", err.msg);

    /* Two-byte characters all along: no cut splits one. */
    static char wide[3001];
    for (int i = 0; i < 3000; i += 2) memcpy(wide + i, "\xc3\xa9", 2);   /* é */
    wide[3000] = '\0';
    for (int shift = 0; shift < 4; shift++) {
        hy_fail(&err, HY_ERR_INPUT, "%.*s%s: the reason", shift, "xyz", wide);
        CHECKF(utf8_ok(err.msg), "shift %d: a cut split a character", shift);
        CHECK(strstr(err.msg, "...") && strstr(err.msg, ": the reason"));
    }

    /* Short messages are whole, and prefixes simply go in front. */
    hy_fail(&err, HY_ERR_INPUT, "%s: %d", "short", 7);
    CHECK(!strcmp(err.msg, "short: 7"));
    hy_error_prefix(&err, "in %s: ", "x.json");
    CHECK(!strcmp(err.msg, "in x.json: short: 7"));
    /* Exactly full: 1023 characters stay as they are. */
    static char full[1024];
    memset(full, 'b', 1023);
    hy_fail(&err, HY_ERR_INPUT, "%s", full);
    CHECK(!strcmp(err.msg, full));

    /* One line of plain text, whatever it quotes. */
    hy_fail(&err, HY_ERR_INPUT, "unknown key '%s' in %s", "a\nb\x1b[31mc\x7f\t",
            "x\xc2\x9b" "2J\xc3\xa9.json");
    CHECKF(!strcmp(err.msg, "unknown key 'a?b?[31mc?" "?' in x?" "?2J\xc3\xa9.json"), "%s",
           err.msg);
    hy_error_prefix(&err, "line\r\n%s: ", "dir\nname");
    CHECKF(!strncmp(err.msg, "line?" "?dir?name: unknown key 'a?b", 32), "%s", err.msg);
    return TEST_END("error");
}
