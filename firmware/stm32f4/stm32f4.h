/*
 * The few STM32F4 registers the pod firmware uses, written from the reference
 * manuals (RM0090 for STM32F405/407/427, RM0368 for F401, RM0383 for F411; the
 * blocks below are identical on these parts): memory map, RCC, GPIO, general-
 * purpose timers TIM2..TIM5, USART2 and the Cortex-M4 NVIC. Offsets are in the
 * comments; reserved words are padding.
 */
#ifndef STM32F4_H
#define STM32F4_H

#include <stdint.h>

#define REG volatile uint32_t

typedef struct {
    REG CR;       /* 0x00 */
    REG PLLCFGR;  /* 0x04 */
    REG CFGR;     /* 0x08 */
    REG CIR;      /* 0x0C */
    REG AHB1RSTR; /* 0x10 */
    REG AHB2RSTR; /* 0x14 */
    REG AHB3RSTR; /* 0x18 */
    REG reserved0;
    REG APB1RSTR; /* 0x20 */
    REG APB2RSTR; /* 0x24 */
    REG reserved1[2];
    REG AHB1ENR; /* 0x30 */
    REG AHB2ENR; /* 0x34 */
    REG AHB3ENR; /* 0x38 */
    REG reserved2;
    REG APB1ENR; /* 0x40 */
    REG APB2ENR; /* 0x44 */
} rcc_t;

typedef struct {
    REG MODER;   /* 0x00: 2 bits per pin: 00 input, 01 output, 10 alternate, 11 analog */
    REG OTYPER;  /* 0x04 */
    REG OSPEEDR; /* 0x08 */
    REG PUPDR;   /* 0x0C: 2 bits per pin: 01 pull-up, 10 pull-down */
    REG IDR;     /* 0x10 */
    REG ODR;     /* 0x14 */
    REG BSRR;    /* 0x18 */
    REG LCKR;    /* 0x1C */
    REG AFR[2];  /* 0x20, 0x24: 4 bits per pin, pins 0-7 then 8-15 */
} gpio_t;

typedef struct {
    REG CR1;   /* 0x00 */
    REG CR2;   /* 0x04 */
    REG SMCR;  /* 0x08 */
    REG DIER;  /* 0x0C */
    REG SR;    /* 0x10: flags cleared by writing 0 (rc_w0) */
    REG EGR;   /* 0x14 */
    REG CCMR1; /* 0x18 */
    REG CCMR2; /* 0x1C */
    REG CCER;  /* 0x20 */
    REG CNT;   /* 0x24: 32 bits on TIM2 and TIM5, 16 on TIM3 and TIM4 */
    REG PSC;   /* 0x28 */
    REG ARR;   /* 0x2C */
    REG reserved0;
    REG CCR1; /* 0x34 */
    REG CCR2; /* 0x38 */
    REG CCR3; /* 0x3C */
    REG CCR4; /* 0x40 */
} tim_t;

typedef struct {
    REG SR;   /* 0x00 */
    REG DR;   /* 0x04 */
    REG BRR;  /* 0x08 */
    REG CR1;  /* 0x0C */
    REG CR2;  /* 0x10 */
    REG CR3;  /* 0x14 */
    REG GTPR; /* 0x18 */
} usart_t;

#define RCC ((rcc_t *)0x40023800u)
#define GPIOA ((gpio_t *)0x40020000u)
#define GPIOB ((gpio_t *)0x40020400u)
#define TIM2 ((tim_t *)0x40000000u)
#define TIM3 ((tim_t *)0x40000400u)
#define TIM4 ((tim_t *)0x40000800u)
#define TIM5 ((tim_t *)0x40000C00u)
#define USART2 ((usart_t *)0x40004400u)
#define NVIC_ISER ((REG *)0xE000E100u) /* interrupt set-enable, 32 IRQs per word */

#define RCC_AHB1ENR_GPIOAEN (1u << 0)
#define RCC_AHB1ENR_GPIOBEN (1u << 1)
#define RCC_APB1ENR_TIM2EN (1u << 0)
#define RCC_APB1ENR_TIM3EN (1u << 1)
#define RCC_APB1ENR_TIM4EN (1u << 2)
#define RCC_APB1ENR_TIM5EN (1u << 3)
#define RCC_APB1ENR_USART2EN (1u << 17)

#define GPIO_MODE_AF 2u
#define GPIO_PULL_UP 1u

#define TIM_CR1_CEN (1u << 0)
#define TIM_SMCR_SMS_ENCODER3 3u /* count on TI1 and TI2 edges: x4 decoding */
#define TIM_DIER_CC1IE (1u << 1)
#define TIM_SR_CC1IF (1u << 1)
#define TIM_EGR_UG (1u << 0)
#define TIM_CCMR1_CC1S_TI1 (1u << 0)
#define TIM_CCMR1_CC2S_TI2 (1u << 8)
#define TIM_CCMR1_IC1F(f) ((uint32_t)(f) << 4)
#define TIM_CCMR1_IC2F(f) ((uint32_t)(f) << 12)
#define TIM_CCER_CC1E (1u << 0)
#define TIM_CCER_CC2E (1u << 4)

#define USART_SR_TXE (1u << 7)
#define USART_CR1_TE (1u << 3)
#define USART_CR1_UE (1u << 13)

#define IRQ_TIM5 50u

#endif
