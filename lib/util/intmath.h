/* intmath.h — small integer helpers shared by the planner, the sizes and the
 * launcher (one definition each). */
#ifndef DTRUN_UTIL_INTMATH_H
#define DTRUN_UTIL_INTMATH_H

/* Greatest common divisor of two non-negative numbers; gcd(0, b) = b. */
static inline long gcd_l(long a, long b)
{
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

#endif
