package e2e

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill cmd when the test process dies
// (a killed or timed-out go test), so no lazyapi outlives its test.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
