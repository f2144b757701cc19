/*
 * checksum.h — CRC-32C of files, as they are written and when they are read
 * back: what lets a checkpoint refuse a flipped bit instead of training on
 * it (checkpoint.h).
 *
 * CRC-32C (Castagnoli, the polynomial iSCSI, ext4 and SQLite's WAL use)
 * detects every burst of up to 32 flipped bits and all but 2^-32 of other
 * corruptions. It is computed in portable C, eight bytes at a step
 * (slicing-by-8, about 2 GB/s), or by SSE4.2's crc32 instruction where the
 * CPU has it (about 3.5x that), so the writer can sum what it writes as it
 * writes it (atomicfile.h) with no second pass.
 */
#ifndef HY_CHECKSUM_H
#define HY_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* The CRC-32C of buf[0..n) continuing from crc (0 to start):
 * hy_crc32c(hy_crc32c(0, a, n), b, m) == hy_crc32c(0, a ++ b, n + m). */
uint32_t hy_crc32c(uint32_t crc, const void *buf, size_t n);

/* The same through the tables alone, whatever the CPU has (hy_crc32c uses
 * the CPU's crc32 instruction where there is one; the tests compare). */
uint32_t hy_crc32c_portable(uint32_t crc, const void *buf, size_t n);

/* A file's size and CRC-32C, summed as its bytes go by. */
typedef struct {
    uint64_t size;
    uint32_t crc;
} hy_file_sum;

void hy_file_sum_add(hy_file_sum *s, const void *buf, size_t n);

/* The sum of the file at path, read from its start to its end. Errors name
 * the path (HY_ERR_INPUT when it is missing or unreadable, HY_ERR_RUNTIME
 * for an I/O error). */
int hy_file_sum_of(const char *path, hy_file_sum *s, hy_error *err);

/* "e3069283": the CRC as 8 lower-case hex digits, into buf[9]. */
void hy_crc32c_text(uint32_t crc, char buf[9]);

/* Parses 8 hex digits (either case); 0 on success, -1 otherwise. */
int hy_crc32c_parse(const char *text, uint32_t *crc);

#endif
