package broker

import "golang.org/x/sys/unix"

// memoryBytes is the machine's memory, for the defaults measured against
// it (Config.YoungQueueBytes); 4 GiB when the kernel does not say.
func memoryBytes() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 4 << 30
	}
	return int64(si.Totalram) * int64(si.Unit)
}
