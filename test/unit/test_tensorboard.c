/* test_tensorboard.c — CRC-32C against its published check value, and one
 * event record's framing and protobuf bytes as the spec in tfevents.h gives
 * them (test/integration/tensorboard.sh reads whole runs back). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "lib/util/crc32c.h"
#include "runtime/train/tfevents.h"

static uint32_t masked(const void *p, size_t n)
{
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

int main(void)
{
    CHECK(crc32c("123456789", 9) == 0xe3069283u, "crc32c(\"123456789\") = 0x%08x (want 0xe3069283)",
          crc32c("123456789", 9));
    CHECK(crc32c("", 0) == 0, "crc32c of nothing is 0");
    char dir[] = "/tmp/test_tensorboard.XXXXXX", err[256];
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    tfevents *t = tfevents_open(dir, err, sizeof err);
    CHECK(t != NULL, "event file opens: %s", t ? tfevents_path(t) : err);
    if (!t) CHECK_DONE();
    tfevents_scalar(t, "a", 300, 0.5);
    char path[4200];
    snprintf(path, sizeof path, "%s", tfevents_path(t));
    tfevents_close(t);
    FILE *f = fopen(path, "rb");
    unsigned char b[256];
    size_t n = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    uint64_t len0;
    memcpy(&len0, b, 8);
    uint32_t c;
    memcpy(&c, b + 8, 4);
    CHECK(len0 == 24 && c == masked(b, 8), "record 1: length %llu, its masked CRC", (unsigned long long)len0);
    CHECK(!memcmp(b + 12 + 9, "\x1a\x0d" "brain.Event:2", 15), "record 1: file_version (field 3) brain.Event:2");
    memcpy(&c, b + 12 + len0, 4);
    CHECK(c == masked(b + 12, len0), "record 1: data CRC");
    const unsigned char *r = b + 16 + len0;
    uint64_t len1;
    memcpy(&len1, r, 8);
    /* Event: 09 <wall 8> 10 ac 02 (step 300) 2a 0a [Summary: 0a 08 [Value: 0a 01 'a' 15 <0.5f>]] */
    static const unsigned char tail[] = {0x10, 0xac, 0x02, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, 'a',
                                         0x15, 0x00, 0x00, 0x00, 0x3f};
    CHECK(n == 16 + len0 + 16 + len1 && len1 == 9 + sizeof tail && r[12] == 0x09 &&
              !memcmp(r + 12 + 9, tail, sizeof tail),
          "record 2: wall_time, step 300 as a varint, summary{value{tag 'a', simple_value 0.5}} (%llu bytes)",
          (unsigned long long)len1);
    memcpy(&c, r + 12 + len1, 4);
    CHECK(c == masked(r + 12, len1), "record 2: data CRC");
    unlink(path);
    rmdir(dir);
    CHECK_DONE();
}
