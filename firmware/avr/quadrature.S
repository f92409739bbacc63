/*
 * The encoder interrupt of the ATmega328P target: three pods on PC0..PC5 (pod k: A on
 * PC(2k), B on PC(2k+1)), one pin-change interrupt for all six lines.
 *
 * Written in assembly because its length sets the highest edge rate the MCU can
 * follow (firmware/README.md): 7 saved registers instead of the 15 avr-gcc saves
 * for the same logic in C, and no table lookup. For a pod whose lines changed
 * since the last interrupt (the previous PINC is kept in GPIOR0):
 *
 *   one line changed   +1 if A(now) != B(before), else -1 (the state table of
 *                      core/pods_core.c, folded: A leads B counts up)
 *   both changed       an edge was missed: counted in neither direction, but in
 *                      pods_errors[k] (uint16, wraps), which the frames carry
 *
 * pods_count[k] (int16, two's complement, wraps) and pods_errors[k] are read by the
 * sample interrupt with interrupts off, so it never sees a half-written counter. The
 * error branch costs the counting path one cycle (brne taken instead of breq not).
 */
#include <avr/io.h>

    .section .text.PCINT1_vect, "ax", @progbits
    .global PCINT1_vect
PCINT1_vect:
    push r24
    in   r24, _SFR_IO_ADDR(SREG)
    push r24
    push r25
    push r23
    push r26
    push r27
    in   r24, _SFR_IO_ADDR(PINC)      /* now */
    in   r25, _SFR_IO_ADDR(GPIOR0)    /* before */
    out  _SFR_IO_ADDR(GPIOR0), r24
    mov  r23, r25
    lsr  r23
    eor  r23, r24                     /* bit 2k: A_k(now) ^ B_k(before): 1 = up */
    eor  r25, r24                     /* lines that changed */

.macro POD k
    mov  r24, r25
    andi r24, (3 << (2 * \k))
    breq 1f
    cpi  r24, (3 << (2 * \k))
    brne 2f
    lds  r26, pods_errors + 2 * \k    /* both lines changed: an edge was missed */
    lds  r27, pods_errors + 2 * \k + 1
    adiw r26, 1
    sts  pods_errors + 2 * \k + 1, r27
    sts  pods_errors + 2 * \k, r26
    rjmp 1f
2:
    lds  r26, pods_count + 2 * \k
    lds  r27, pods_count + 2 * \k + 1
    sbrs r23, 2 * \k
    sbiw r26, 2                       /* down: -2 + 1 */
    adiw r26, 1
    sts  pods_count + 2 * \k + 1, r27
    sts  pods_count + 2 * \k, r26
1:
.endm

    POD 0
    POD 1
    POD 2

    pop  r27
    pop  r26
    pop  r23
    pop  r25
    pop  r24
    out  _SFR_IO_ADDR(SREG), r24
    pop  r24
    reti
