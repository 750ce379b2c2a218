//! Integration tests of `strobe record`.
