package nf

import (
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/cnibench/cnibench/internal/ethtool"
	"github.com/cnibench/cnibench/internal/netns"
)

// The offloads the kinds switch on the interfaces of a chain, in the interface's namespace
// (the requests themselves: internal/ethtool).

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
		on, err = getFeature(ep.Dev, f)
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
		if was, err = getFeature(ep.Dev, f); err != nil || was == on {
			return err
		}
		data := uint32(0)
		if on {
			data = 1
		}
		if err := ethtool.SetValue(ep.Dev, f.set, data); err != nil {
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

// getFeature reads f of dev (in the calling thread's namespace).
func getFeature(dev string, f Feature) (bool, error) {
	v, err := ethtool.Value(dev, f.get)
	if err != nil {
		return false, fmt.Errorf("read %s of %s: %w", f, dev, err)
	}
	return v != 0, nil
}
