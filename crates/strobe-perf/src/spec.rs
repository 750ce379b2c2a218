//! Event specs in perf's syntax, e.g. `{task-clock/period=1ms,window=20us/,page-faults}`.
//! (Being built.)
