// gospin: a Go program that measures its own CPU time per function. Built by
// crates/strobe-testprogs/build.rs twice: statically (CGO_ENABLED=0) and with cgo
// (adding gospin_cgo.go), the two kinds of Go program strobe's agent cannot serve.
//
// usage: gospin [CPU_MS]   (default 400)
//
// On one locked OS thread it loops: spinA burns 2 ms of the thread's CPU time, spinB
// 1 ms, until they ran CPU_MS together; then prints its ground truth, the CPU time of
// each (CLOCK_THREAD_CPUTIME_ID around each call).
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

var sink uint64

func threadCPU() int64 {
	var ts syscall.Timespec
	// CLOCK_THREAD_CPUTIME_ID = 3
	syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

//go:noinline
func burn(ns int64, seed uint64) {
	end := threadCPU() + ns
	x := seed
	for {
		for i := 0; i < 20000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
		sink = x
		if threadCPU() >= end {
			return
		}
	}
}

//go:noinline
func spinA() { burn(2000000, 1) }

//go:noinline
func spinB() { burn(1000000, 2) }

func main() {
	cpuMs := int64(400)
	if len(os.Args) > 1 {
		if v, err := strconv.ParseInt(os.Args[1], 10, 64); err == nil {
			cpuMs = v
		}
	}
	runtime.LockOSThread()
	cgoNote()
	var a, b int64
	for (a+b)/1000000 < cpuMs {
		t0 := threadCPU()
		spinA()
		t1 := threadCPU()
		spinB()
		t2 := threadCPU()
		a += t1 - t0
		b += t2 - t1
	}
	fmt.Printf("spinA_ns=%d spinB_ns=%d\n", a, b)
}
