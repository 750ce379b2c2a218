//! The perf mmap ring buffer: reading records the kernel writes. (Being built.)
