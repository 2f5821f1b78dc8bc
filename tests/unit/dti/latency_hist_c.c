/* dti/include/dti/latency_hist.h compiles and works as C11 (libdti and the
 * shim are C): records, a percentile, exit 0. */
#include <dti/latency_hist.h>

#include <stdio.h>

int main(void)
{
    static struct eta_hist h;
    for (uint64_t v = 1; v <= 1000; v++)
        eta_hist_record(&h, v);
    const uint64_t p50 = eta_hist_quantile(&h, 0.5);
    if (eta_hist_count(&h) != 1000 || p50 < 500 || p50 > 500 + 500 / 16 || h.max != 1000) {
        fprintf(stderr, "latency_hist in C: count %llu p50 %llu max %llu\n", (unsigned long long)eta_hist_count(&h),
                (unsigned long long)p50, (unsigned long long)h.max);
        return 1;
    }
    return 0;
}
