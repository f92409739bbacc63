/* The portable pod-MCU core: see pods_core.h and docs/PROTOCOLS.md. */
#include "pods_core.h"

/* Keeps the compiler from moving the slot's stores or loads across the index update
 * (one core, so no hardware barrier is needed on the targets). */
#if defined(__GNUC__)
#define PODS_BARRIER() __asm__ __volatile__("" ::: "memory")
#else
#define PODS_BARRIER()
#endif

const int8_t pods_quad_table[16] = {
    /* prev 0 (B0 A0) -> now 0, 1, 2, 3 */ 0, +1, -1, 0,
    /* prev 1 (B0 A1) */ -1, 0, 0, +1,
    /* prev 2 (B1 A0) */ +1, 0, 0, -1,
    /* prev 3 (B1 A1) */ 0, -1, +1, 0,
};

int pods_init(pods_core_t *core, uint8_t n_pods, uint8_t counter_bits, uint8_t imu)
{
    if (n_pods < 1 || n_pods > PODS_MAX_PODS || (counter_bits != 16 && counter_bits != 32))
        return -1;
    core->n_pods = n_pods;
    core->counter_bits = counter_bits;
    core->imu = imu ? 1u : 0u;
    core->errors = 0;
    for (uint8_t i = 0; i < PODS_MAX_PODS; i++)
        core->sent_errors[i] = 0;
    core->sent_dropped = 0;
    core->next_seq = 0;
    core->dropped = 0;
    core->head = 0;
    core->tail = 0;
    return 0;
}

uint8_t pods_frame_length(const pods_core_t *core)
{
    return (uint8_t)(12u + core->n_pods * (core->counter_bits / 8u) + (core->imu ? 8u : 0u));
}

uint16_t pods_crc16(const uint8_t *data, uint8_t length)
{
    uint16_t crc = 0xFFFFu;
    while (length--) {
        crc ^= (uint16_t)((uint16_t)*data++ << 8);
        for (uint8_t bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000u) ? (uint16_t)((crc << 1) ^ 0x1021u) : (uint16_t)(crc << 1);
    }
    return crc;
}

uint8_t pods_latch(pods_core_t *core, uint32_t t_us, const uint32_t *counts, float yaw_rate,
                   float yaw)
{
    return pods_latch_errors(core, t_us, counts, 0, yaw_rate, yaw);
}

uint8_t pods_latch_errors(pods_core_t *core, uint32_t t_us, const uint32_t *counts,
                          const uint16_t *errors, float yaw_rate, float yaw)
{
    uint8_t head = core->head;
    uint16_t seq = core->next_seq++;
    if ((uint8_t)(head - core->tail) >= PODS_QUEUE) {
        core->dropped++;
        return 0;
    }
    pods_sample_t *s = &core->queue[head % PODS_QUEUE];
    s->seq = seq;
    s->t_us = t_us;
    uint8_t changed = (uint8_t)((seq & 15u) == 0u || core->dropped != core->sent_dropped);
    for (uint8_t i = 0; i < core->n_pods; i++) {
        s->counts[i] = counts[i];
        s->errors[i] = errors ? errors[i] : 0u;
        changed |= (uint8_t)(s->errors[i] != core->sent_errors[i]);
    }
    s->overruns = core->dropped;
    s->with_errors = (uint8_t)(core->errors && changed);
    if (s->with_errors) {
        for (uint8_t i = 0; i < core->n_pods; i++)
            core->sent_errors[i] = s->errors[i];
        core->sent_dropped = core->dropped;
    }
    s->yaw_rate = yaw_rate;
    s->yaw = yaw;
    PODS_BARRIER();
    core->head = (uint8_t)(head + 1u); /* publish after the slot is complete */
    return 1;
}

static uint8_t *put_le(uint8_t *p, uint32_t value, uint8_t bytes)
{
    while (bytes--) {
        *p++ = (uint8_t)value;
        value >>= 8;
    }
    return p;
}

static uint32_t float_bits(float value)
{
    union {
        float f;
        uint32_t u;
    } v;
    v.f = value;
    return v.u;
}

uint8_t pods_encode(const pods_core_t *core, const pods_sample_t *sample, uint8_t *out)
{
    uint8_t width = (uint8_t)(core->counter_bits / 8u);
    uint8_t *p = out;
    *p++ = PODS_SYNC0;
    *p++ = PODS_SYNC1;
    uint8_t with_errors = (uint8_t)(core->errors && sample->with_errors);
    *p++ = (uint8_t)(pods_frame_length(core) - 5u + (with_errors ? 2u * core->n_pods + 2u : 0u));
    *p++ = (uint8_t)((core->n_pods << PODS_N_SHIFT) | (width == 4 ? PODS_FLAG_COUNTS32 : 0u) |
                     (core->imu ? PODS_FLAG_IMU : 0u) | (with_errors ? PODS_FLAG_ERRORS : 0u));
    p = put_le(p, sample->seq, 2);
    p = put_le(p, sample->t_us, 4);
    for (uint8_t i = 0; i < core->n_pods; i++)
        p = put_le(p, sample->counts[i], width);
    if (core->imu) {
        p = put_le(p, float_bits(sample->yaw_rate), 4);
        p = put_le(p, float_bits(sample->yaw), 4);
    }
    if (with_errors) {
        for (uint8_t i = 0; i < core->n_pods; i++)
            p = put_le(p, sample->errors[i], 2);
        p = put_le(p, sample->overruns, 2);
    }
    uint16_t crc = pods_crc16(out + 2, (uint8_t)(p - out - 2));
    p = put_le(p, crc, 2);
    return (uint8_t)(p - out);
}

uint8_t pods_pop_frame(pods_core_t *core, uint8_t *out)
{
    uint8_t tail = core->tail;
    if (tail == core->head)
        return 0;
    uint8_t length = pods_encode(core, &core->queue[tail % PODS_QUEUE], out);
    PODS_BARRIER();
    core->tail = (uint8_t)(tail + 1u); /* free the slot after it was read */
    return length;
}
