#ifndef COURIER_CCRC32_H
#define COURIER_CCRC32_H

#include <stddef.h>
#include <stdint.h>

/// The CRC-32 of zip entries (zlib's `crc32`): `crc` is the CRC of the bytes before `data` (0 to
/// start). Carry-less multiplication on x86-64 CPUs that have it, a table elsewhere.
uint32_t courier_crc32(uint32_t crc, const void *data, size_t len);

/// The same CRC from the table alone (for tests and comparisons).
uint32_t courier_crc32_portable(uint32_t crc, const void *data, size_t len);

#endif
