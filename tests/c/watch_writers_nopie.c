/* watch_writers built as a position-dependent executable (ELF type ET_EXEC), so symbol
 * resolution is tested on both kinds of executable. */
// strobe-testprogs: -no-pie -fno-pie
#include "watch_writers.c"
