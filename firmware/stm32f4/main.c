/*
 * Pod MCU firmware for STM32F4 boards (F401, F411 "Black Pill", F405/F407, Nucleo-F4):
 * three encoders counted in hardware by timers in encoder mode, no interrupt per edge.
 *
 *   pod 0   TIM2: A = PA0, B = PA1 (AF1)
 *   pod 1   TIM3: A = PA6, B = PA7 (AF2)
 *   pod 2   TIM4: A = PB6, B = PB7 (AF2)
 *   UART    USART2 TX = PA2 (AF7; the ST-LINK virtual COM port on Nucleo boards),
 *           115200 baud 8N1
 *   clock   the 16 MHz internal RC oscillator (HSI) as it comes out of reset: no PLL,
 *           no crystal, the same on every F4 part (+-1 % over temperature: t_us is
 *           that accurate; the host's clock fit absorbs the rate)
 *
 * The encoder inputs have pull-ups and the timers' input filter (8 samples at
 * 16 MHz: levels shorter than 0.5 us are ignored). TIM5 (32 bits) runs at 1 MHz and
 * is t_us itself; its compare channel 1 interrupts every 1e6 / PODS_RATE_HZ us,
 * reads the three counters, extends them to 32 bits and queues the sample with
 * t_us = the compare value. The main loop sends queued frames by polling TXE and
 * sleeps (WFI) otherwise.
 */
#include "pods_core.h"
#include "stm32f4.h"

#ifndef PODS_RATE_HZ
#define PODS_RATE_HZ 200
#endif
#ifndef PODS_COUNTER_BITS
#define PODS_COUNTER_BITS 16
#endif
#define PODS_N 3
#define PERIOD_US (1000000u / PODS_RATE_HZ)
#define HSI_HZ 16000000u
#define BAUD 115200u

#if 1000000u % PODS_RATE_HZ != 0
#error "PODS_RATE_HZ must divide 1e6"
#endif

static pods_core_t core;
static tim_t *const encoder[PODS_N] = {TIM2, TIM3, TIM4};
static uint16_t last16[PODS_N];
static uint32_t wide[PODS_N];

void TIM5_IRQHandler(void)
{
    if (!(TIM5->SR & TIM_SR_CC1IF))
        return;
    TIM5->SR = ~TIM_SR_CC1IF;
    uint32_t t_us = TIM5->CCR1;
    TIM5->CCR1 = t_us + PERIOD_US;
    for (unsigned k = 0; k < PODS_N; k++) {
        uint16_t now = (uint16_t)encoder[k]->CNT;
        wide[k] += (uint32_t)(int32_t)(int16_t)(uint16_t)(now - last16[k]);
        last16[k] = now;
    }
    pods_latch(&core, t_us, wide, 0.0f, 0.0f);
}

static void pin_af(gpio_t *port, unsigned pin, unsigned af, unsigned pull)
{
    port->MODER = (port->MODER & ~(3u << (2 * pin))) | (GPIO_MODE_AF << (2 * pin));
    port->PUPDR = (port->PUPDR & ~(3u << (2 * pin))) | (pull << (2 * pin));
    port->AFR[pin / 8] = (port->AFR[pin / 8] & ~(15u << (4 * (pin % 8)))) |
                         (af << (4 * (pin % 8)));
}

static void encoder_init(tim_t *tim)
{
    tim->SMCR = TIM_SMCR_SMS_ENCODER3;
    tim->CCMR1 = TIM_CCMR1_CC1S_TI1 | TIM_CCMR1_CC2S_TI2 | TIM_CCMR1_IC1F(3) |
                 TIM_CCMR1_IC2F(3);
    tim->CCER = TIM_CCER_CC1E | TIM_CCER_CC2E;
    tim->ARR = 0xFFFFu;
    tim->CNT = 0;
    tim->CR1 = TIM_CR1_CEN;
}

static void uart_send(const uint8_t *data, uint8_t length)
{
    while (length--) {
        while (!(USART2->SR & USART_SR_TXE))
            ;
        USART2->DR = *data++;
    }
}

int main(void)
{
    static uint8_t frame[PODS_FRAME_MAX];

    RCC->AHB1ENR |= RCC_AHB1ENR_GPIOAEN | RCC_AHB1ENR_GPIOBEN;
    RCC->APB1ENR |= RCC_APB1ENR_TIM2EN | RCC_APB1ENR_TIM3EN | RCC_APB1ENR_TIM4EN |
                    RCC_APB1ENR_TIM5EN | RCC_APB1ENR_USART2EN;
    (void)RCC->APB1ENR; /* the clocks are on once this read returns */

    pin_af(GPIOA, 0, 1, GPIO_PULL_UP);
    pin_af(GPIOA, 1, 1, GPIO_PULL_UP);
    pin_af(GPIOA, 6, 2, GPIO_PULL_UP);
    pin_af(GPIOA, 7, 2, GPIO_PULL_UP);
    pin_af(GPIOB, 6, 2, GPIO_PULL_UP);
    pin_af(GPIOB, 7, 2, GPIO_PULL_UP);
    pin_af(GPIOA, 2, 7, 0);

    USART2->BRR = (HSI_HZ + BAUD / 2) / BAUD; /* 139: 115 108 baud, -0.08 % */
    USART2->CR1 = USART_CR1_UE | USART_CR1_TE;

    pods_init(&core, PODS_N, PODS_COUNTER_BITS, 0);
    core.errors = 1; /* overruns only: encoder mode reports no lost edge (README) */
    for (unsigned k = 0; k < PODS_N; k++)
        encoder_init(encoder[k]);

    TIM5->PSC = HSI_HZ / 1000000u - 1u; /* 1 MHz: CNT is t_us */
    TIM5->ARR = 0xFFFFFFFFu;
    TIM5->EGR = TIM_EGR_UG; /* load the prescaler; CNT = 0 */
    TIM5->SR = 0;
    TIM5->CCR1 = PERIOD_US;
    TIM5->DIER = TIM_DIER_CC1IE;
    NVIC_ISER[IRQ_TIM5 / 32] = 1u << (IRQ_TIM5 % 32);
    TIM5->CR1 = TIM_CR1_CEN; /* start: t_us = 0 now */

    for (;;) {
        uint8_t length = pods_pop_frame(&core, frame);
        if (length) {
            uart_send(frame, length);
            continue;
        }
        __asm__ volatile("cpsid i" ::: "memory");
        if (core.head == core.tail)
            __asm__ volatile("wfi"); /* a pending interrupt wakes it even while masked */
        __asm__ volatile("cpsie i" ::: "memory");
    }
}
