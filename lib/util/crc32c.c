/* crc32c.c — see crc32c.h. Byte at a time: event records are a few dozen
 * bytes per scalar, so speed is no concern. */
#include "lib/util/crc32c.h"

static uint32_t table[256];
static int table_ready;

static void make_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        __atomic_store_n(&table[i], c, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&table_ready, 1, __ATOMIC_RELEASE);
}

uint32_t crc32c(const void *buf, size_t len)
{
    if (!__atomic_load_n(&table_ready, __ATOMIC_ACQUIRE)) make_table();
    const unsigned char *p = buf;
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < len; i++) c = __atomic_load_n(&table[(c ^ p[i]) & 0xff], __ATOMIC_RELAXED) ^ (c >> 8);
    return c ^ 0xffffffffu;
}
