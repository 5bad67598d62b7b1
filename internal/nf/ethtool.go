package nf

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/netns"
)

// The ethtool requests the kinds make on the interfaces of a chain (SIOCETHTOOL on a socket
// of the interface's namespace), as `ethtool -k/-K DEV` and `ethtool -l DEV` would: this file
// is their one owner.

// Feature is an on/off setting of an interface that ethtool reads and writes.
type Feature struct {
	name     string
	get, set uint32 // ETHTOOL_G*, ETHTOOL_S* (struct ethtool_value commands)
}

var (
	// GRO is generic receive offload (`ethtool -K DEV gro on|off`).
	GRO = Feature{"GRO", unix.ETHTOOL_GGRO, unix.ETHTOOL_SGRO}
	// TxChecksum is transmit checksumming (`ethtool -K DEV tx on|off`); off also takes TSO
	// away (the stack then segments and checksums what it sends itself).
	TxChecksum = Feature{"TX checksumming", unix.ETHTOOL_GTXCSUM, unix.ETHTOOL_STXCSUM}
)

// String is the feature's name for messages.
func (f Feature) String() string { return f.name }

// FeatureOn tells whether f of ep is on.
func FeatureOn(ep Endpoint, f Feature) (on bool, err error) {
	err = netns.Do(ep.NS, func() error {
		fd, err := ethtoolSocket()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		on, err = getFeature(fd, ep.Dev, f)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("in %s: %w", ep.NS, err)
	}
	return on, nil
}

// SetFeature switches f of ep on or off and returns whether it was on.
func SetFeature(ep Endpoint, f Feature, on bool) (was bool, err error) {
	err = netns.Do(ep.NS, func() error {
		fd, err := ethtoolSocket()
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if was, err = getFeature(fd, ep.Dev, f); err != nil || was == on {
			return err
		}
		v := ethtoolValue{cmd: f.set}
		if on {
			v.data = 1
		}
		if err := ethtool(fd, ep.Dev, unsafe.Pointer(&v)); err != nil {
			return fmt.Errorf("switch %s of %s to %v: %w", f, ep.Dev, on, err)
		}
		return nil
	})
	if err != nil {
		return was, fmt.Errorf("in %s: %w", ep.NS, err)
	}
	return was, nil
}

// SwitchFeature sets f of ep to on and returns what sets it back (nothing when it already
// was). An endpoint without a namespace or interface is left alone. Setting it back on an
// interface or namespace that is gone is no error.
func SwitchFeature(ep Endpoint, f Feature, on bool) (undo func() error, err error) {
	nothing := func() error { return nil }
	if ep.NS == "" || ep.Dev == "" {
		return nothing, nil
	}
	was, err := SetFeature(ep, f, on)
	if err != nil {
		return nil, err
	}
	if was == on {
		return nothing, nil
	}
	return func() error {
		if _, err := SetFeature(ep, f, was); err != nil && !gone(err) {
			return err
		}
		return nil
	}, nil
}

// gone tells whether an error only says that a namespace or interface no longer exists.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// RxQueues is the number of receive queues in use on dev (call it inside the namespace); a
// device that does not say has one.
func RxQueues(dev string) (int, error) {
	fd, err := ethtoolSocket()
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ch := ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	if err := ethtool(fd, dev, unsafe.Pointer(&ch)); err != nil {
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

// ethtoolSocket is a socket to make ethtool requests on, in the calling thread's namespace.
func ethtoolSocket() (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket for ethtool requests: %w", err)
	}
	return fd, nil
}

// getFeature reads f of dev through fd.
func getFeature(fd int, dev string, f Feature) (bool, error) {
	v := ethtoolValue{cmd: f.get}
	if err := ethtool(fd, dev, unsafe.Pointer(&v)); err != nil {
		return false, fmt.Errorf("read %s of %s: %w", f, dev, err)
	}
	return v.data != 0, nil
}

// ethtool makes the ethtool request data (a struct whose first member is the command) on dev
// through fd; the error is the bare errno.
func ethtool(fd int, dev string, data unsafe.Pointer) error {
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
