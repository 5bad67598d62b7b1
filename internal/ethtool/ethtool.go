// Package ethtool makes the SIOCETHTOOL requests cnibench needs on an interface of the calling
// thread's network namespace, as `ethtool -k/-K DEV` and `ethtool -l DEV` would: it is their
// one owner. It stands below every package that switches offloads (internal/nf) or counts
// queues (internal/xsk).
package ethtool

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Value makes an ETHTOOL_G* request of struct ethtool_value (cmd) on dev and returns its data.
func Value(dev string, cmd uint32) (uint32, error) {
	fd, err := socket()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: cmd}
	if err := request(fd, dev, unsafe.Pointer(&v)); err != nil {
		return 0, err
	}
	return v.data, nil
}

// SetValue makes an ETHTOOL_S* request of struct ethtool_value (cmd) with data on dev.
func SetValue(dev string, cmd, data uint32) error {
	fd, err := socket()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	v := ethtoolValue{cmd: cmd, data: data}
	return request(fd, dev, unsafe.Pointer(&v))
}

// RxQueues is the number of receive queues in use on dev; a device that does not say has one.
func RxQueues(dev string) (int, error) {
	fd, err := socket()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	if err := request(fd, dev, unsafe.Pointer(&ch)); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return 1, nil
		}
		return 0, fmt.Errorf("channels of %s: %w", dev, err)
	}
	return int(ch.rxCount + ch.combinedCount), nil
}

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

// ethtoolChannels is struct ethtool_channels.
type ethtoolChannels struct {
	cmd                                         uint32
	maxRX, maxTX, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with its ifr_data member (40 bytes on 64-bit Linux).
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte
}

// socket is a socket to make ethtool requests on, in the calling thread's namespace.
func socket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket for ethtool requests: %w", err)
	}
	return fd, nil
}

// request makes the ethtool request data (a struct whose first member is the command) on dev
// through fd; the error is the bare errno.
func request(fd int, dev string, data unsafe.Pointer) error {
	var ifr ifreqData
	if len(dev) >= len(ifr.name) {
		return fmt.Errorf("interface name %q too long", dev)
	}
	copy(ifr.name[:], dev)
	ifr.data = data
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(&ifr)
	if errno != 0 {
		return errno
	}
	return nil
}
