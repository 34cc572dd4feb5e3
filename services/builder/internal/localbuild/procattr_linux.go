package localbuild

import "syscall"

// childAttr makes the kernel kill an install command when the builder dies,
// so a SIGKILLed builder leaves no npm or pip running on behind it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
