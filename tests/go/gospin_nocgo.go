//go:build !cgo

package main

func cgoNote() {}
