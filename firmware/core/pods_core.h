/*
 * The portable core of the pod MCU firmware: quadrature decoding, latching the
 * counters at a fixed rate, and the binary frame of docs/PROTOCOLS.md.
 *
 * Nothing here touches hardware. A target layer (avr/, stm32f4/) counts the
 * encoders, calls pods_latch() from its sample-rate interrupt with the MCU time
 * (t_us) and the counters, and sends what pods_pop_frame() returns on its UART.
 *
 *   seq      uint16, +1 per latched sample from 0 at start; a sample that could
 *            not be queued (the UART is still busy with older frames) leaves a
 *            gap the host counts as lost
 *   t_us     uint32 MCU microseconds at the latch, wraps at 2^32
 *   counts   cumulative quadrature counts, sent as their low 16 or 32 bits
 *   IMU      yaw rate (rad/s) and yaw (rad), float32, when configured
 *   errors   per pod the edges lost because both lines changed between two looks,
 *            then the latches that found the queue full, uint16 each, cumulative
 *            since start (wrapping), when configured (core->errors), in the frames
 *            whose values changed since the last frame queued with them and in
 *            every 16th (seq % 16 == 0): a lost frame delays a report by < 16 frames,
 *            and the other frames stay as short as without them
 *   CRC      CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no
 *            final XOR) over the len byte .. last payload byte, little-endian
 *
 * The queue between the interrupt (producer) and the main loop (consumer) is a
 * single-producer single-consumer ring: only the producer writes `head`, only the
 * consumer writes `tail`, each is one byte (atomic on every target).
 */
#ifndef PODS_CORE_H
#define PODS_CORE_H

#include <stdint.h>

#ifndef PODS_MAX_PODS
#define PODS_MAX_PODS 15 /* the protocol's limit (4 bits of flags) */
#endif
#ifndef PODS_QUEUE
#define PODS_QUEUE 4 /* latched samples waiting for the UART (a power of two) */
#endif

#define PODS_SYNC0 0xAAu
#define PODS_SYNC1 0x55u
#define PODS_FLAG_IMU 0x01u
#define PODS_FLAG_COUNTS32 0x02u
#define PODS_FLAG_ERRORS 0x04u
#define PODS_N_SHIFT 4
/* sync 2 + len 1 + flags 1 + seq 2 + t_us 4 + counters + IMU 8 + errors + CRC 2 */
#define PODS_FRAME_MAX (12 + 4 * PODS_MAX_PODS + 8 + 2 * PODS_MAX_PODS + 2)

typedef struct {
    uint16_t seq;
    uint32_t t_us;
    uint32_t counts[PODS_MAX_PODS];
    float yaw_rate;
    float yaw;
    uint16_t errors[PODS_MAX_PODS]; /* cumulative lost edges per pod */
    uint16_t overruns;              /* cumulative latches dropped (queue full) */
    uint8_t with_errors;            /* the frame carries errors and overruns */
} pods_sample_t;

typedef struct {
    uint8_t n_pods;       /* 1 .. PODS_MAX_PODS */
    uint8_t counter_bits; /* 16 or 32 */
    uint8_t imu;          /* 1: frames carry yaw_rate and yaw */
    uint8_t errors;       /* 1: frames carry the error block (set after pods_init) */
    uint16_t next_seq;    /* seq of the next latch */
    uint16_t dropped;     /* latches that found the queue full (wraps) */
    uint16_t sent_errors[PODS_MAX_PODS]; /* the error block last queued */
    uint16_t sent_dropped;
    volatile uint8_t head; /* written by pods_latch only */
    volatile uint8_t tail; /* written by pods_pop_frame only */
    pods_sample_t queue[PODS_QUEUE];
} pods_core_t;

/* Quadrature step of one encoder from its previous to its new 2-bit state
 * (B << 1 | A: A on the lower pin): +1, -1, 0 for no change, and 0 for an
 * impossible double step (both lines changed: an edge was missed;
 * pods_quad_error() says so). Count direction: +1 when A leads B (A rises while
 * B is low: states 0 -> 1 -> 3 -> 2 -> 0); swap A and B to count the other way. */
extern const int8_t pods_quad_table[16];
#define PODS_QUAD_INDEX(prev, now) ((uint8_t)((((prev) & 3u) << 2) | ((now) & 3u)))
#define pods_quad_error(prev, now) ((((prev) ^ (now)) & 3u) == 3u)

/* Returns 0, or -1 for a layout the protocol cannot carry. */
int pods_init(pods_core_t *core, uint8_t n_pods, uint8_t counter_bits, uint8_t imu);

/* Interrupt side: queue one sample (counts[0 .. n_pods-1]); returns 1 if queued,
 * 0 if the queue was full (the sample is dropped, its seq is used up). */
uint8_t pods_latch(pods_core_t *core, uint32_t t_us, const uint32_t *counts, float yaw_rate,
                   float yaw);

/* pods_latch with the target's cumulative lost-edge counts (errors[0 .. n_pods-1],
 * snapshot with the counts); frames carry them when core->errors is 1. */
uint8_t pods_latch_errors(pods_core_t *core, uint32_t t_us, const uint32_t *counts,
                          const uint16_t *errors, float yaw_rate, float yaw);

/* Main-loop side: encode the oldest queued sample into out (PODS_FRAME_MAX bytes)
 * and return its length, or 0 when nothing is queued. */
uint8_t pods_pop_frame(pods_core_t *core, uint8_t *out);

/* One frame from its fields (what pods_pop_frame does with a queued sample). */
uint8_t pods_encode(const pods_core_t *core, const pods_sample_t *sample, uint8_t *out);

/* Bytes of a frame without the error block (which adds 2 * n_pods + 2). */
uint8_t pods_frame_length(const pods_core_t *core);
uint16_t pods_crc16(const uint8_t *data, uint8_t length);

#endif
