// Package names makes the random parts of the names cnibench gives what it creates (lab
// prefixes, scratch namespaces, Kubernetes objects, temporary directories).
package names

import "crypto/rand"

// Lower is the alphabet of lab prefixes and scratch namespaces: lowercase letters and digits.
const Lower = "abcdefghijklmnopqrstuvwxyz0123456789"

// Kube is the alphabet Kubernetes uses for generated names (no vowels, no look-alikes).
const Kube = "bcdfghjklmnpqrstvwxz2456789"

// Random returns n characters drawn from alphabet (at most 256 characters long).
func Random(alphabet string, n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand panics on a broken source)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}
