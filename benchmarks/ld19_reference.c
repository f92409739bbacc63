/* LD19 stream parser as a plain C state machine: the benchmark's reference.
 *
 * The straightforward way to parse the LD19 stream in a compiled language, byte by
 * byte: wait for the header 0x54 0x2C, collect 47 bytes, check the CRC-8 (poly 0x4D,
 * table lookup per byte, the CRC of a packet with its CRC byte is 0) and the angles
 * (start and end below 36000 cdeg), emit the fields; after a bad packet, resume at the
 * next header inside the 47 bytes already read. The state survives between calls, so
 * the stream can be fed in reads of any size, as from a serial port.
 *
 * Output per packet, 28 int32: speed (deg/s), start (cdeg), 12 x (distance mm,
 * intensity), end (cdeg), timestamp (ms).
 */
#include <stdint.h>
#include <string.h>

#define PACKET 47

typedef struct {
    uint8_t buf[PACKET];
    int32_t have;
} ld19_state;

static inline uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void emit(const uint8_t *p, int32_t *out) {
    out[0] = u16(p + 2);
    out[1] = u16(p + 4);
    for (int k = 0; k < 12; k++) {
        out[2 + 2 * k] = u16(p + 6 + 3 * k);
        out[3 + 2 * k] = p[8 + 3 * k];
    }
    out[26] = u16(p + 42);
    out[27] = u16(p + 44);
}

/* Feed n bytes; returns the packets written to out (at most max_out). */
int64_t ld19_feed(ld19_state *st, const uint8_t *data, int64_t n, const uint8_t *crc_table,
                  int32_t *out, int64_t max_out) {
    int64_t found = 0;
    uint8_t *buf = st->buf;
    int32_t have = st->have;
    for (int64_t i = 0; i < n; i++) {
        uint8_t b = data[i];
        if (have == 0) {
            if (b == 0x54) buf[have++] = b;
            continue;
        }
        if (have == 1) {
            if (b == 0x2C) buf[have++] = b;
            else have = (b == 0x54);
            continue;
        }
        buf[have++] = b;
        if (have < PACKET) continue;
        uint8_t crc = 0;
        for (int j = 0; j < PACKET; j++) crc = crc_table[crc ^ buf[j]];
        if (crc == 0 && u16(buf + 4) < 36000 && u16(buf + 42) < 36000 && found < max_out) {
            emit(buf, out + 28 * found);
            found++;
            have = 0;
            continue;
        }
        int32_t k = 1; /* resume at the next header already read */
        while (k < PACKET && !(buf[k] == 0x54 && (k == PACKET - 1 || buf[k + 1] == 0x2C))) k++;
        have = PACKET - k;
        memmove(buf, buf + k, (size_t)have);
    }
    st->have = have;
    return found;
}
