//! Integration tests of `strobe report`.
