//! Integration tests of `strobe watch`.
