//! Integration tests of `strobe probe`.
