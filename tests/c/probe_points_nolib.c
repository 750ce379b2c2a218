/* probe_points built without the probe library (STROBE_PROBE_OPTIONAL: the header's
 * functions are weak), so it runs unchanged and each site switches itself off on its
 * first hit; `strobe probe` injects the library with LD_PRELOAD. */
#define STROBE_PROBE_OPTIONAL
#include "probe_points.c"
