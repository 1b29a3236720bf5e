/* crc32c.h — CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum of TensorBoard's event-file records. Debian's zlib has only the
 * other CRC-32, so this is one table and a loop. */
#ifndef DTRUN_UTIL_CRC32C_H
#define DTRUN_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of buf[0..len); crc32c("123456789") = 0xE3069283. */
uint32_t crc32c(const void *buf, size_t len);

#endif
