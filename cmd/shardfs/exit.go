package main

import "errors"

// The exit codes of every command, in one place. Scripts and CI jobs act
// on them: verify's and repair's say how damaged a dataset is.
const (
	exitOK      = 0
	exitFailure = 1 // the command failed; its error says why (doctor: this node is not ready)
	// verify and repair:
	exitDamaged       = 1 // damage found, repair can fix it
	exitUnrecoverable = 2 // some block stripe lost more than m blocks
	exitNotChecked    = 3 // could not check: a store did not answer, wrong stores or order, cancelled, not found
)

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode is the process's exit code for a command's error.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return exitFailure
}
