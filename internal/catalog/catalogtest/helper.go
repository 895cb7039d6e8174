package catalogtest

// HelperMain is a placeholder until the cross-process harness lands.
func HelperMain() {}
