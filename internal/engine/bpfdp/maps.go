package bpfdp

// What the data paths' map writers share (the load balancers', the policy maps', the
// forwarder's and the polycube chain's): byte order of keys and values, batched writes and
// deletes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

func be32(a netip.Addr) uint32 {
	b := a.As4()
	return binary.NativeEndian.Uint32(b[:])
}

func be16(v uint16) uint16 { return binary.NativeEndian.Uint16([]byte{byte(v >> 8), byte(v)}) }

// deleteWhere deletes the keys of m for which stale is true.
func deleteWhere[K any](m *ebpf.Map, stale func(K) bool) error {
	var gone []K
	var k K
	var v []byte
	it := m.Iterate()
	for it.Next(&k, &v) {
		if stale(k) {
			gone = append(gone, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("walk: %w", err)
	}
	for _, k := range gone {
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}

// deleteKeys deletes keys from m in one call where it can; a key already gone is no error.
// The kernel's batch delete stops at the first key it does not find (reporting how many it
// deleted), so the rest are then deleted one by one.
func deleteKeys[K any](m *ebpf.Map, keys []K) error {
	if len(keys) == 0 {
		return nil
	}
	done, err := m.BatchDelete(keys, nil)
	if err == nil && done == len(keys) {
		return nil
	}
	if err != nil && !errors.Is(err, ebpf.ErrNotSupported) && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("delete: %w", err)
	}
	rest := keys[min(max(done, 0), len(keys)):]
	for i := range rest {
		if err := m.Delete(&rest[i]); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}

// batchUpdate writes keys/values in one call (element by element where batches are not
// supported).
func batchUpdate[K, V any](m *ebpf.Map, keys []K, vals []V) error {
	if len(keys) == 0 {
		return nil
	}
	n, err := m.BatchUpdate(keys, vals, nil)
	if err == nil && n == len(keys) {
		return nil
	}
	if err != nil && !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	for i := range keys {
		if err := m.Update(&keys[i], &vals[i], ebpf.UpdateAny); err != nil {
			return err
		}
	}
	return nil
}
