/*
 * Reset handler and vector table of the STM32F4 target (Cortex-M4, ARMv7-M: the
 * first 16 entries are the core's, then the part's interrupts; RM0090 table 61).
 * No C library: the freestanding memcpy/memset the compiler may call are here.
 */
#include <stddef.h>
#include <stdint.h>

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
int main(void);

void Reset_Handler(void);
void Default_Handler(void);
void TIM5_IRQHandler(void);

void Reset_Handler(void)
{
    const uint32_t *src = &_sidata;
    for (uint32_t *dst = &_sdata; dst < &_edata;)
        *dst++ = *src++;
    for (uint32_t *dst = &_sbss; dst < &_ebss;)
        *dst++ = 0;
    main();
    for (;;)
        ;
}

void Default_Handler(void)
{
    for (;;)
        ;
}

#define CORE_VECTORS 16
#define IRQ_VECTORS 98 /* enough for every F4 part */

__attribute__((section(".isr_vector"), used)) void (*const vector_table[CORE_VECTORS +
                                                                        IRQ_VECTORS])(void) = {
    [0] = (void (*)(void))(uintptr_t)&_estack,
    [1] = Reset_Handler,
    [2 ... CORE_VECTORS + 49] = Default_Handler,
    [CORE_VECTORS + 50] = TIM5_IRQHandler, /* IRQ 50: TIM5 global interrupt */
    [CORE_VECTORS + 51 ... CORE_VECTORS + IRQ_VECTORS - 1] = Default_Handler,
};

void *memcpy(void *dst, const void *src, size_t n)
{
    uint8_t *d = dst;
    const uint8_t *s = src;
    while (n--)
        *d++ = *s++;
    return dst;
}

void *memset(void *dst, int value, size_t n)
{
    uint8_t *d = dst;
    while (n--)
        *d++ = (uint8_t)value;
    return dst;
}
