//go:build !linux

package build

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
