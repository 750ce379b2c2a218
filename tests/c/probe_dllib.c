// strobe-testprogs: shared -DSTROBE_PROBE_OPTIONAL
/* A shared library with C probe sites, which probe_dlclose loads with dlopen and
 * unloads with dlclose: one site it fires (dl_site) and one it never reaches
 * (dl_never). Built as libprobe_dllib.so. */
#include "strobe_probe.h"

void dl_fire(long x) { STROBE_PROBE(dl_site, x); }

void dl_unused(void) { STROBE_PROBE(dl_never); }
