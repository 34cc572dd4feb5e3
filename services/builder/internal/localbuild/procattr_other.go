//go:build !linux

package localbuild

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
