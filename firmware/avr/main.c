/*
 * Pod MCU firmware for the ATmega328P (Arduino Uno, Nano) at 16 MHz.
 *
 *   encoders   pod 0: A0 (PC0) = A, A1 (PC1) = B; pod 1: A2/A3 (PC2/PC3);
 *              pod 2: A4/A5 (PC4/PC5); internal pull-ups on
 *   UART       TX on D1 (PD1), 115200 baud 8N1 (U2X, UBRR 16: 117 647 baud, +2.1 %)
 *   LED        D13 (PB5) lit while streaming
 *
 * Decoding: one pin-change interrupt (PCINT1, quadrature.S) for all six lines; it
 * reads PINC once and steps each pod whose lines changed, into 16-bit counters.
 * Timer 1 (CTC, F_CPU/8) fires every 1e6 / PODS_RATE_HZ us; its interrupt copies
 * the counters (a consistent snapshot: interrupts are off on entry), re-enables
 * interrupts so the encoders are not held up, extends the counters to 32 bits (a
 * pod moves far less than 2^15 counts in one period) and queues the sample with
 * t_us = the compare instant and the lost-edge counts (both lines changed between
 * two pin-change interrupts: PODS_ERRORS, on by default, puts them in every frame).
 * The main loop encodes the queued frames, writes them to the UART by polling
 * (no UART interrupt adds latency to the encoder interrupt) and sleeps otherwise.
 * t_us is 0 when Timer 1 starts; the first frame is latched one period later.
 */
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>

#include "pods_core.h"

#ifndef PODS_RATE_HZ
#define PODS_RATE_HZ 200
#endif
#ifndef PODS_COUNTER_BITS
#define PODS_COUNTER_BITS 16
#endif
#ifndef PODS_ERRORS
#define PODS_ERRORS 1
#endif
#define PODS_N 3

#define PERIOD_US (1000000UL / PODS_RATE_HZ)
#define TIMER_TICKS_PER_US (F_CPU / 8UL / 1000000UL)

#if F_CPU != 16000000UL
#error "timing constants assume a 16 MHz clock"
#endif
#if 1000000UL % PODS_RATE_HZ != 0 || PERIOD_US * TIMER_TICKS_PER_US > 65536UL
#error "PODS_RATE_HZ must divide 1e6 and be at least 31 Hz"
#endif

static pods_core_t core;
volatile int16_t pods_count[PODS_N]; /* stepped by PCINT1 (quadrature.S) */
volatile uint16_t pods_errors[PODS_N]; /* edges lost: both lines changed (quadrature.S) */
static int16_t last16[PODS_N];       /* the counters at the previous latch */
static uint32_t wide[PODS_N];        /* the counters extended to 32 bits */
static uint32_t t_us;

ISR(TIMER1_COMPA_vect)
{
    int16_t now16[PODS_N] = {pods_count[0], pods_count[1], pods_count[2]};
    uint16_t errors[PODS_N] = {pods_errors[0], pods_errors[1], pods_errors[2]};
    sei(); /* the snapshot is taken: let the encoders in again */
    for (uint8_t k = 0; k < PODS_N; k++) {
        wide[k] += (uint32_t)(int32_t)(int16_t)(now16[k] - last16[k]);
        last16[k] = now16[k];
    }
    t_us += PERIOD_US;
    pods_latch_errors(&core, t_us, wide, errors, 0.0f, 0.0f);
}

static void uart_send(const uint8_t *data, uint8_t length)
{
    while (length--) {
        while (!(UCSR0A & _BV(UDRE0)))
            ;
        UDR0 = *data++;
    }
}

int main(void)
{
    static uint8_t frame[PODS_FRAME_MAX];

    cli();
    DDRB |= _BV(PB5);
    UBRR0 = 16;
    UCSR0A = _BV(U2X0);
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
    UCSR0B = _BV(TXEN0);
    DDRC &= (uint8_t)~0x3Fu;
    PORTC |= 0x3Fu;
    pods_init(&core, PODS_N, PODS_COUNTER_BITS, 0);
    core.errors = PODS_ERRORS;
    TCCR1A = 0;
    TCCR1B = _BV(WGM12); /* CTC on OCR1A, clock still stopped */
    TCNT1 = 0;
    OCR1A = (uint16_t)(PERIOD_US * TIMER_TICKS_PER_US - 1u);
    TIFR1 = _BV(OCF1A);
    TIMSK1 = _BV(OCIE1A);
    PCMSK1 = 0x3Fu;
    GPIOR0 = PINC; /* the state the first edge is decoded against */
    PCIFR = _BV(PCIF1);
    PCICR = _BV(PCIE1);
    TCCR1B = _BV(WGM12) | _BV(CS11); /* start: t_us = 0 now */
    PORTB |= _BV(PB5);
    set_sleep_mode(SLEEP_MODE_IDLE);
    sei();
    for (;;) {
        uint8_t length = pods_pop_frame(&core, frame);
        if (length) {
            uart_send(frame, length);
            continue;
        }
        cli();
        if (core.head == core.tail) {
            sleep_enable();
            sei(); /* the instruction after sei runs first: no wake-up is missed */
            sleep_cpu();
            sleep_disable();
        }
        sei();
    }
}
