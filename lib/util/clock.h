/* clock.h — the one monotonic clock of dtrun (launcher and worker alike).
 * CLOCK_MONOTONIC: never jumps with the wall clock, so deadlines, timeouts and
 * step timings stay right across NTP adjustments. */
#ifndef DTRUN_UTIL_CLOCK_H
#define DTRUN_UTIL_CLOCK_H

#include <stdint.h>

int64_t clock_now_ns(void);
int64_t clock_now_ms(void);
double clock_now_s(void);

#endif
