/*
 * clock.h — the monotonic clock every layer reads: request timings, step timings, deadlines.
 *
 * One definition so that times taken in different folders (the scheduler's first-token stamp,
 * the server's access log, the watchdog) are on the same clock and can be subtracted.
 */
#ifndef KVSERVE_CLOCK_H
#define KVSERVE_CLOCK_H

#include <stdint.h>
#include <time.h>

/* Microseconds of CLOCK_MONOTONIC (an arbitrary origin: only differences mean anything). */
static inline int64_t clk_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The same clock in whole milliseconds (deadlines). */
static inline int64_t clk_now_ms(void)
{
    return clk_now_us() / 1000;
}

#endif
