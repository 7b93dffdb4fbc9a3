/* slot.h - Redis Cluster hash slots: CRC16 (XMODEM) of the key, or of its
 * {hash tag}, modulo 16384. */
#ifndef SLUICE_SLOT_H
#define SLUICE_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define SLOT_COUNT 16384

uint16_t slot_crc16(const char *buf, size_t len);
uint16_t slot_for_key(const char *key, size_t len);

#endif
