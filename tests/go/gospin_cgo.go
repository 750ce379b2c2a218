//go:build cgo

package main

/*
static int strobe_cgo_answer(void) { return 42; }
*/
import "C"

// cgoNote calls into C once, so the program is linked with cgo (dynamically, against
// libc) and starts its threads through it.
func cgoNote() {
	if C.strobe_cgo_answer() != 42 {
		panic("cgo")
	}
}
