/*
 * test_checksum.c — CRC-32C (lib/checksum.h).
 *
 * The standard check value (CRC-32C of "123456789" is e3069283, RFC 3720),
 * agreement with a bit-at-a-time reference on random buffers of every
 * length up to 300 and at every offset (which exercises all eight tables
 * and the tail), continuation across pieces, the file sum against the
 * buffer's, and the hex text both ways.
 */
#include "checksum.h"
#include "rng.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One bit at a time, from the definition. */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (crc & 1 ? 0x82f63b78u : 0);
    }
    return ~crc;
}

int main(void) {
    /* The standard check value, through whichever path this CPU takes and
     * through the tables. */
    CHECK(hy_crc32c(0, "123456789", 9) == 0xe3069283u);
    CHECK(hy_crc32c_portable(0, "123456789", 9) == 0xe3069283u);
    CHECK(hy_crc32c(0, "", 0) == 0);

    hy_rng r = hy_rng_stream(7, 0);
    unsigned char buf[320];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)hy_rng_below(&r, 256);
    int bad = 0, bad_tables = 0;
    for (size_t off = 0; off < 8; off++)
        for (size_t n = 0; n + off <= 300; n++) {
            uint32_t want = crc_bitwise(buf + off, n);
            bad += hy_crc32c(0, buf + off, n) != want;
            bad_tables += hy_crc32c_portable(0, buf + off, n) != want;
        }
    CHECKF(bad == 0, "%d lengths or offsets differ from the bitwise CRC", bad);
    CHECKF(bad_tables == 0, "tables: %d lengths or offsets differ from the bitwise CRC",
           bad_tables);
    /* Continued from a CRC so far: both paths agree on the pieces. */
    CHECK(hy_crc32c(hy_crc32c(0, buf, 13), buf + 13, 200) ==
          hy_crc32c_portable(hy_crc32c_portable(0, buf, 13), buf + 13, 200));

    /* In pieces, as a writer sums what it writes. */
    hy_file_sum s = { 0, 0 };
    hy_file_sum_add(&s, buf, 5);
    hy_file_sum_add(&s, buf + 5, 0);
    hy_file_sum_add(&s, buf + 5, 290);
    CHECK(s.size == 295 && s.crc == hy_crc32c(0, buf, 295));

    /* The file sum reads back what was written. */
    char path[] = "/tmp/hy-test-checksum-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(write(fd, buf, 295) == 295);
        close(fd);
        hy_file_sum t;
        hy_error err;
        CHECK(hy_file_sum_of(path, &t, &err) == HY_OK && t.size == 295 && t.crc == s.crc);
        unlink(path);
        CHECK(hy_file_sum_of(path, &t, &err) == HY_ERR_INPUT && strstr(err.msg, path));
    }

    char text[9];
    uint32_t back = 0;
    hy_crc32c_text(0xe3069283u, text);
    CHECK(strcmp(text, "e3069283") == 0);
    CHECK(hy_crc32c_parse(text, &back) == 0 && back == 0xe3069283u);
    CHECK(hy_crc32c_parse("E3069283", &back) == 0 && back == 0xe3069283u);
    CHECK(hy_crc32c_parse("e306928", &back) == -1);
    CHECK(hy_crc32c_parse("e30692830", &back) == -1);
    CHECK(hy_crc32c_parse("e306928g", &back) == -1);
    return TEST_END("checksum");
}
