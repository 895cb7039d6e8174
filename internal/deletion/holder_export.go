package deletion

// DefaultHolder is the name this process uses in leases by default:
// "<host> pid <pid>" (plus " ns <inode>" of its PID namespace). Other
// engines that claim work (the garbage collector) use it too, so that a
// dead process's leases are recognised by DeadLocalHolder.
func DefaultHolder() string { return defaultHolder() }

// DeadLocalHolder reports whether a lease holder named by DefaultHolder
// is a process of this host and PID namespace that no longer exists.
func DeadLocalHolder(holder string) bool { return deadLocalHolder(holder) }
