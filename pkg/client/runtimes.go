package client

// Runtimes are the runtimes a function may name, in the order of
// slessv1.Runtimes (their owner; a test holds the two equal). They are the
// generated enum constants, so the CLI and the Terraform provider list them
// without linking the Kubernetes API types.
func Runtimes() []FunctionInputRuntime {
	return []FunctionInputRuntime{FunctionInputRuntimePython311, FunctionInputRuntimeNodejs20}
}
